package runtime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// franz-go's GroupTransactSession passes only the first revoke, and the first loss, of a
// transaction on to OnPartitionsRevoked and OnPartitionsLost: its wrappers return at once while
// the transaction's revoked (lost) flag is set, until End resets it (kgo/txn.go,
// NewGroupTransactSession). A member whose End is slow (End(TryAbort) flushes the produces in
// flight) when a second rebalance takes more of its partitions is never told: it would keep them
// as its own (helper-99). No record is lost or handled twice (the transaction aborts all the same,
// and franz-go stops fetching them), but their state stays: no Rebalanced event, their pauses and
// attempt counts kept. So after a transaction in which a revoke or a loss reached the member, the
// poll loop asks the group's coordinator what the member owns (checkOwnership) and drops the rest
// as revoked (dropUnowned).

// ownCheckTimeout bounds one DescribeGroups request of checkOwnership.
const ownCheckTimeout = 5 * time.Second

// checkOwnership runs on the Transactional poll loop after End, between two transactions. It is due
// when a revoke or a loss reached this member since just before the previous End (beforeEnd is the
// count of them just before this one): a revoke the session passed on during or just after that
// End set the flag that may swallow the next one in this transaction (helper-100). It compares the
// partitions the member holds with its assignment in the group's coordinator (kadm
// DescribeGroups), and drops those the coordinator no longer assigns to it. The answer counts only
// from a Stable group that lists this member; until then it asks again after each End, for at
// most the group's rebalance timeout (kgo.RebalanceTimeout, 60 s by default). It gives up with a
// warning then, or at once when the coordinator refuses (kerr errors that are not retriable, such
// as GROUP_AUTHORIZATION_FAILED without Describe on the group).
func (c *consumer) checkOwnership(ctx context.Context, beforeEnd uint64) {
	due := c.ownRetry || c.revokes.Load() != c.ownMark
	c.ownMark, c.ownRetry = beforeEnd, false
	if !due || ctx.Err() != nil {
		return
	}
	if c.ownSince.IsZero() {
		c.ownSince = time.Now()
	}
	unowned, err := c.unowned(ctx)
	bound, _ := c.cl.OptValue(kgo.RebalanceTimeout).(time.Duration)
	switch {
	case err == nil:
		c.dropUnowned(unowned)
	case errors.Is(err, errNotYet) && time.Since(c.ownSince) < bound:
		c.ownRetry = true // asked again after the next End
		return
	default:
		c.log.Warn("tidemark: could not check this member's partitions against its group's coordinator after a revoke; a partition revoked later in the same transaction may still be held",
			"err", err, "for", time.Since(c.ownSince).Round(time.Millisecond))
	}
	c.ownSince = time.Time{}
}

// errNotYet is unowned's answer while the coordinator cannot say yet what this member owns.
var errNotYet = errors.New("tidemark: the group is not stable with this member in it yet")

// unowned returns the states of the partitions this member held before it asked that its group's
// coordinator does not assign to it; errNotYet (wrapped) while the coordinator cannot tell yet
// (see checkOwnership). The states are taken before the question: a partition assigned to the
// member after the answer was given is not among them (helper-100).
func (c *consumer) unowned(ctx context.Context) ([]*partState, error) {
	member, _ := c.cl.GroupMetadata()
	if member == "" {
		return nil, fmt.Errorf("%w: it has not joined", errNotYet)
	}
	held := c.d.owned()
	dctx, cancel := context.WithTimeout(ctx, ownCheckTimeout)
	defer cancel()
	gs, err := kadm.NewClient(c.cl).DescribeGroups(dctx, c.group) // not closed: that would close c.cl
	if err != nil {
		return nil, fmt.Errorf("%w: describe group %q: %w", errNotYet, c.group, err)
	}
	g := gs[c.group]
	switch {
	case g.Err != nil && !kerr.IsRetriable(g.Err):
		return nil, fmt.Errorf("tidemark: describe group %q: %w", c.group, g.Err)
	case g.Err != nil:
		return nil, fmt.Errorf("%w: describe group %q: %w", errNotYet, c.group, g.Err)
	case g.State != "Stable":
		return nil, fmt.Errorf("%w: group %q is %s", errNotYet, c.group, g.State)
	}
	i := slices.IndexFunc(g.Members, func(m kadm.DescribedGroupMember) bool { return m.MemberID == member })
	if i < 0 {
		return nil, fmt.Errorf("%w: group %q does not list member %q", errNotYet, c.group, member)
	}
	a, ok := g.Members[i].Assigned.AsConsumer()
	if !ok {
		return nil, fmt.Errorf("tidemark: group %q: member %q has no consumer assignment (protocol type %q)", c.group, member, g.ProtocolType)
	}
	assigned := make(map[tp]bool)
	for _, t := range a.Topics {
		for _, p := range t.Partitions {
			assigned[tp{t.Topic, p}] = true
		}
	}
	return slices.DeleteFunc(held, func(ps *partState) bool { return assigned[ps.tp] }), nil
}

// dropUnowned gives partitions that franz-go revoked without telling this member (see above) the
// Transactional revoke: those still held are detached, their handlers' contexts cancelled, and a
// Rebalanced "revoked" event reports them. It runs between two transactions, so no window holds
// their records.
func (c *consumer) dropUnowned(pss []*partState) {
	pss = c.d.detachStates(pss)
	if len(pss) == 0 {
		return
	}
	var revoked map[string][]int32
	for _, ps := range pss {
		revoked = addPartition(revoked, ps.tp)
		ps.cancel(errRevoked)
	}
	c.log.Warn("tidemark: the group's coordinator no longer assigns these partitions to this member, and franz-go's transact session did not say so (it passes on only a transaction's first revoke): dropping them", "partitions", revoked)
	c.obs.Rebalanced(RebalancedEvent{Group: c.group, Kind: "revoked", Partitions: revoked})
}

// addPartition adds t to m, which it allocates if nil, and returns m.
func addPartition(m map[string][]int32, t tp) map[string][]int32 {
	if m == nil {
		m = make(map[string][]int32)
	}
	m[t.topic] = append(m[t.topic], t.partition)
	return m
}
