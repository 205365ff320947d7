package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/internal/probe"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

const (
	markEvery     = 10 * time.Millisecond // at most one MarkCommitOffsets per subscription per this
	reportEvery   = time.Second           // InFlight events, and kadm commits of manual partitions
	commitTimeout = 5 * time.Second       // bound of a revoke's or shutdown's final commit (DESIGN §3.7)
	probeTimeout  = time.Second           // bound of a metadata question to one broker (brokerTopic)
)

// committer publishes moved positions: one MarkCommitOffsets per wake-up with every partition
// whose position moved, the tracker's watermark (Tracked, DESIGN §3.11) or the record after the
// highest one done (Auto, see markDone); franz-go's autocommit commits the marks. Manual
// partitions are committed with kadm instead. It also reports in-flight gauges.
func (c *consumer) committer() {
	defer close(c.commDone)
	tick := time.NewTicker(reportEvery)
	defer tick.Stop()
	for {
		select {
		case <-c.stopComm:
			return
		case <-c.wake:
			c.markMoved()
			select { // coalesce: at most one mark call per markEvery
			case <-c.stopComm:
				return
			case <-time.After(markEvery):
			}
		case <-tick.C:
			c.markMoved()
			c.reportInFlight()
			if c.manual {
				ctx, cancel := commitContext(c.workCtx)
				if err := c.commitManual(ctx); err != nil {
					c.log.Warn("tidemark: commit failed; will retry", "err", err)
				}
				cancel()
			}
		}
	}
}

// markMoved marks every owned partition whose position moved since the last call.
func (c *consumer) markMoved() {
	if c.txnMode {
		return
	}
	c.markMu.Lock()
	defer c.markMu.Unlock()
	offs := make(map[string]map[int32]kgo.EpochOffset)
	for _, ps := range c.d.owned() {
		if ps.sealed.Load() { // its final marks were made
			continue
		}
		if eo, ok := ps.moved(); ok {
			addOffset(offs, ps.tp, eo)
		}
	}
	c.markLocked(offs)
}

// markLocked hands positions to franz-go (group) or to the kadm pending set (manual). markMu held.
func (c *consumer) markLocked(offs map[string]map[int32]kgo.EpochOffset) {
	if len(offs) == 0 {
		return
	}
	if !c.manual {
		c.cl.MarkCommitOffsets(offs)
		return
	}
	c.manualMu.Lock()
	defer c.manualMu.Unlock()
	if c.manualPending == nil {
		c.manualPending = make(map[tp]kgo.EpochOffset)
	}
	for t, ps := range offs {
		for p, eo := range ps {
			c.manualPending[tp{t, p}] = eo
		}
	}
}

// commitManual commits the pending positions of manual partitions into the subscription's group
// with kadm: what markMoved and finalMarks handed to markLocked. Each partition the cluster
// acknowledged is reported with a Committed event; a failed one's position stays pending for the
// next commit (unless a newer one replaced it) and the first error is returned.
func (c *consumer) commitManual(ctx context.Context) error {
	if c.adm == nil {
		return nil
	}
	c.manualMu.Lock()
	pending := c.manualPending
	c.manualPending = nil
	c.manualMu.Unlock()
	if len(pending) == 0 {
		return nil
	}
	// kadm commits by name: to a topic deleted and created again, the old topic's positions would
	// land on the new one, whose records below them a restart would skip. Its ID is asked of a
	// broker before each commit (once a second, and at Shutdown; bounded by probeTimeout, and a
	// commit goes ahead when no answer comes); a re-creation between the two is not seen.
	topic := c.sub.topics[0]
	recreated := c.recreated.Load() != nil
	if id := c.manualTopicID; !recreated && id != ([16]byte{}) {
		got, _, ok := c.brokerTopic(ctx, topic)
		recreated = ok && got != ([16]byte{}) && got != id
	}
	if recreated {
		c.log.Warn("tidemark: offsets not committed: the topic was deleted and created again", "topic", topic, "offsets", len(pending))
		return nil
	}
	var os kadm.Offsets
	for k, eo := range pending {
		os.Add(kadm.Offset{Topic: k.topic, Partition: k.partition, At: eo.Offset, LeaderEpoch: eo.Epoch})
	}
	resp, err := c.adm.CommitOffsets(ctx, c.group, os)
	failed := pending // what stays pending: everything after a failed request
	if err == nil {
		failed = maps.Clone(pending) // a partition the response leaves out stays pending too
		resp.Each(func(r kadm.OffsetResponse) {
			k := tp{r.Topic, r.Partition}
			if r.Err != nil {
				err = cmp.Or(err, r.Err)
				return
			}
			if eo, ok := pending[k]; ok {
				delete(failed, k)
				c.obs.Committed(CommittedEvent{Group: c.group, Topic: r.Topic, Partition: r.Partition, Offset: eo.Offset})
			}
		})
		if len(failed) > 0 && err == nil {
			err = errors.New("the response left partitions out")
		}
	}
	if len(failed) == 0 {
		return nil
	}
	if (errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID)) && c.topicGone(ctx, topic, c.manualTopicID) {
		c.log.Warn("tidemark: offsets not committed: the topic no longer exists", "topic", topic, "err", err)
		return nil // a deleted topic's positions have nowhere to go
	}
	switch {
	case ctx.Err() == nil:
	case errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded):
		err = context.Cause(ctx) // ErrCommitTimeout, when its bound passed (commitContext)
	default:
		// franz-go retries a coordinator that is unavailable, loading or moving until ctx ends,
		// and then returns its last answer, which kadm reports per partition.
		err = fmt.Errorf("%w (last answer: %w)", context.Cause(ctx), err)
	}
	c.manualMu.Lock()
	if c.manualPending == nil {
		c.manualPending = make(map[tp]kgo.EpochOffset)
	}
	for k, eo := range failed {
		if _, newer := c.manualPending[k]; !newer {
			c.manualPending[k] = eo
		}
	}
	c.manualMu.Unlock()
	return fmt.Errorf("tidemark: commit of manual partitions to group %q: %w", c.group, err)
}

// commitMarked commits franz-go's marks synchronously (revoke and shutdown) and reports each
// partition the cluster acknowledged with a Committed event, those of a commit that failed for
// others included. It returns the partitions' errors joined, or the request's, except for the
// partitions of a topic that no longer exists (UNKNOWN_TOPIC_OR_PARTITION or UNKNOWN_TOPIC_ID,
// and a broker asked directly does not know the topic either, or knows it by another topic ID: it
// was deleted, and maybe created again, as a topic a Pattern subscription reads may be), which are
// logged at Warn: there is no offset left to keep.
// A coordinator that only lags behind a topic's creation answers the same codes for a topic that
// exists: that is a failure.
func (c *consumer) commitMarked(ctx context.Context) error {
	if c.manual {
		return c.commitManual(ctx)
	}
	marked := c.cl.MarkedOffsets()
	if len(marked) == 0 {
		return nil
	}
	// franz-go waits for the autocommits before this one without looking at ctx
	// (commitOffsetsSync), and against brokers that stopped answering they retry for minutes: wait
	// here for ctx at most. The commit goes on, and ends at the latest when the client closes.
	type result struct {
		req  *kmsg.OffsetCommitRequest
		resp *kmsg.OffsetCommitResponse
		err  error
	}
	done := make(chan result, 1)
	go c.cl.CommitOffsetsSync(ctx, marked, func(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
		done <- result{req, resp, err}
	})
	var r result
	select {
	case r = <-done:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	if r.err != nil {
		if ctx.Err() != nil {
			return context.Cause(ctx) // ErrCommitTimeout, when its bound passed (commitContext)
		}
		return r.err
	}
	var errs []error
	unknown := map[string][]error{} // by topic: partitions the cluster said it does not know
	eachCommitted(r.req, r.resp, func(topic string, partition int32, offset int64, err error) {
		switch {
		case err == nil:
			c.obs.Committed(CommittedEvent{Group: c.group, Topic: topic, Partition: partition, Offset: offset})
		case errors.Is(err, kerr.UnknownTopicOrPartition) || errors.Is(err, kerr.UnknownTopicID):
			unknown[topic] = append(unknown[topic], fmt.Errorf("%s[%d]: %w", topic, partition, err))
		default:
			errs = append(errs, fmt.Errorf("%s[%d]: %w", topic, partition, err))
		}
	})
	ids := map[string][16]byte{} // the topic IDs the request named (v10+), to tell a topic created again
	for _, t := range r.req.Topics {
		ids[t.Topic] = t.TopicID
	}
	for topic, terrs := range unknown {
		if c.topicGone(ctx, topic, ids[topic]) {
			c.log.Warn("tidemark: offsets not committed: the topic no longer exists", "topic", topic, "err", errors.Join(terrs...))
			continue
		}
		errs = append(errs, terrs...) // a coordinator behind on the topic's creation, say: a failure
	}
	return errors.Join(errs...)
}

// topicGone reports whether the cluster says topic, with the topic ID id (zero: not known), does
// not exist, asking a broker directly (the client's own metadata requests may be answered from its
// cache): it is unknown, or it has another ID (it was deleted and created again: franz-go keeps
// the old ID, and fails the topic with UNKNOWN_TOPIC_ID); false if it cannot tell.
func (c *consumer) topicGone(ctx context.Context, topic string, id [16]byte) bool {
	got, unknown, ok := c.brokerTopic(ctx, topic)
	return ok && (unknown || id != [16]byte{} && got != [16]byte{} && got != id)
}

// brokerTopic asks one broker directly (probe.Metadata, bounded by probeTimeout) for topic: its
// ID (zero if the broker gives none), whether the broker does not know the topic, and whether it
// answered either way (false: no answer in time, or another error).
func (c *consumer) brokerTopic(ctx context.Context, topic string) (id [16]byte, unknown, ok bool) {
	ctx, cancel := context.WithTimeout(ctx, probeTimeout)
	defer cancel()
	resp, err := probe.Metadata(ctx, c.cl, topic)
	if err != nil || len(resp.Topics) != 1 {
		return id, false, false
	}
	switch t := resp.Topics[0]; t.ErrorCode {
	case 0:
		return t.TopicID, false, true
	case kerr.UnknownTopicOrPartition.Code:
		return id, true, true
	}
	return id, false, false
}

// commitContext returns the ctx of a commit made outside franz-go's autocommit (a revoke's or
// Shutdown's final commit, a manual subscription's): parent, bounded by commitTimeout, whose
// cause is then ErrCommitTimeout (commitMarked and commitManual return it, commitManual with the
// coordinator's last answer beside it).
func commitContext(parent context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeoutCause(parent, commitTimeout, ErrCommitTimeout)
}

// onAutoCommit reports what franz-go's autocommit committed: each partition the response
// acknowledged, with the offset its request carried. (Not the client's CommittedOffsets: franz-go
// leaves those as they were for a response that arrives after its generation moved on, and a
// v10+ response names topics by ID only; the request has both names and IDs.)
// It replaces franz-go's default callback, which logged failures at Error, so it logs them: a
// failed request, and the partitions the coordinator refused (TOPIC_AUTHORIZATION_FAILED, say,
// which no retry mends: nothing commits, and lag grows), in one Warn line per autocommit.
// Refusals a rebalance explains (rebalanceRefusal), which the next generation's commits make
// good, are logged at Debug, as is a request cancelled as the group is left or the client closes.
func (c *consumer) onAutoCommit(_ *kgo.Client, req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, err error) {
	if err != nil {
		level := slog.LevelWarn
		if errors.Is(err, context.Canceled) || errors.Is(err, kgo.ErrClientClosed) {
			level = slog.LevelDebug
		}
		c.log.Log(context.Background(), level, "tidemark: autocommit failed", "err", err)
		return
	}
	var refused, rebalance []error
	eachCommitted(req, resp, func(topic string, partition int32, offset int64, err error) {
		switch {
		case err == nil:
			if c.observed {
				c.obs.Committed(CommittedEvent{Group: c.group, Topic: topic, Partition: partition, Offset: offset})
			}
		case rebalanceRefusal(err):
			rebalance = append(rebalance, fmt.Errorf("%s[%d]: %w", topic, partition, err))
		default:
			refused = append(refused, fmt.Errorf("%s[%d]: %w", topic, partition, err))
		}
	})
	if slices.ContainsFunc(refused, func(e error) bool { return errors.Is(e, kerr.FencedInstanceID) }) { // the member's, not a partition's
		c.instanceFenced(c.cl, errors.Join(refused...))
		return
	}
	if len(refused) > 0 {
		c.log.Warn("tidemark: autocommit refused; offsets not committed", "err", errors.Join(refused...))
	}
	if len(rebalance) > 0 {
		c.log.Debug("tidemark: autocommit refused during a rebalance", "err", errors.Join(rebalance...))
	}
}

// rebalanceRefusal reports whether err, a partition's OffsetCommit error, says the commit came
// from a generation a rebalance replaced (KIP-848's STALE_MEMBER_EPOCH among them).
func rebalanceRefusal(err error) bool {
	return errors.Is(err, kerr.RebalanceInProgress) || errors.Is(err, kerr.IllegalGeneration) ||
		errors.Is(err, kerr.UnknownMemberID) || errors.Is(err, kerr.StaleMemberEpoch)
}

// eachCommitted calls fn for each partition of resp, the answer to the OffsetCommit req: its topic
// (named by req when a v10+ response names it by ID only), partition, the offset req carried for
// it (the response has none), and its error (nil: committed). A partition req does not name is
// passed on only with an error, and offset -1: its refusal is not lost, and nothing says what it
// committed.
func eachCommitted(req *kmsg.OffsetCommitRequest, resp *kmsg.OffsetCommitResponse, fn func(topic string, partition int32, offset int64, err error)) {
	if req == nil || resp == nil {
		return
	}
	offs := make(map[tp]int64)
	names := make(map[[16]byte]string, len(req.Topics))
	for _, t := range req.Topics {
		names[t.TopicID] = t.Topic
		for _, p := range t.Partitions {
			offs[tp{t.Topic, p.Partition}] = p.Offset
		}
	}
	for _, t := range resp.Topics {
		topic := cmp.Or(t.Topic, names[t.TopicID])
		for _, p := range t.Partitions {
			o, ok := offs[tp{topic, p.Partition}]
			switch err := kerr.ErrorForCode(p.ErrorCode); {
			case ok:
				fn(topic, p.Partition, o, err)
			case err != nil:
				fn(topic, p.Partition, -1, err)
			}
		}
	}
}

// reportInFlight sends one InFlight event per owned partition.
func (c *consumer) reportInFlight() {
	now := time.Now()
	c.d.mu.Lock()
	evs := make([]InFlightEvent, 0, len(c.d.parts))
	for _, ps := range c.d.parts {
		ev := InFlightEvent{Group: c.group, Topic: ps.topic, Partition: ps.partition, InFlight: ps.inFlight()}
		if ps.trk != nil {
			if off, ok := ps.trk.Oldest(); ok {
				if off != ps.oldest {
					ps.oldest, ps.oldestSince = off, now
				}
				ev.OldestAge = now.Sub(ps.oldestSince)
			}
		}
		evs = append(evs, ev)
	}
	c.d.mu.Unlock()
	for _, ev := range evs {
		c.obs.InFlight(ev)
	}
}

func addOffset(offs map[string]map[int32]kgo.EpochOffset, k tp, eo kgo.EpochOffset) {
	m := offs[k.topic]
	if m == nil {
		m = make(map[int32]kgo.EpochOffset)
		offs[k.topic] = m
	}
	m[k.partition] = eo
}
