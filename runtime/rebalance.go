package runtime

import (
	"context"
	"errors"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	errRevoked     = errors.New("tidemark: partition revoked")
	errRevokeBound = errors.New("tidemark: partition revoked and its drain bound passed")
	errLost        = errors.New("tidemark: partition lost")
)

// onAssigned creates the state of newly assigned partitions, before their offsets are fetched
// (franz-go calls it before fetching starts; with BlockRebalanceOnPoll it never overlaps a poll's
// dispatch). The first call marks the subscription ready.
func (c *consumer) onAssigned(_ context.Context, _ *kgo.Client, added map[string][]int32) {
	for topic, parts := range added {
		for _, p := range parts {
			c.d.add(c.newPart(tp{topic, p}))
		}
	}
	if len(added) > 0 {
		c.obs.Rebalanced(RebalancedEvent{Group: c.group, Kind: "assigned", Partitions: added})
	}
	c.readyOnce.Do(func() { close(c.ready) })
}

// onRevoked runs DESIGN §3.7's revoke: stop dispatching the partitions' queued records, wait up to
// RevokeDrainTimeout for their running handlers, mark what finished, CommitMarkedOffsets, then start
// a new generation so late completions change nothing. It replaces franz-go's commit-on-revoke.
// When the group is left at shutdown, Shutdown has drained and committed already: it only seals,
// and commits again only if Shutdown's commit was refused before its bound passed.
func (c *consumer) onRevoked(ctx context.Context, _ *kgo.Client, revoked map[string][]int32) {
	if len(revoked) == 0 {
		return // cooperative groups call it with nothing at the end of every session
	}
	if c.txnMode {
		c.revokes.Add(1) // later revokes in this transaction may not reach us (ownership.go)
	}
	pss := c.d.detach(revoked)
	c.obs.Rebalanced(RebalancedEvent{Group: c.group, Kind: "revoked", Partitions: revoked})
	if len(pss) == 0 {
		return
	}
	if c.txnMode { // the session aborts the window; End commits, never the callback (DESIGN §3.11)
		c.abortCurrentWindow(errRevokedWindow)
		for _, ps := range pss {
			ps.cancel(errRevoked)
		}
		return
	}
	cause := errRevoked    // the handlers have returned: it ends what they left running with their ctx
	if !c.closing.Load() { // at shutdown the drain already ran, bounded by Shutdown's ctx
		dctx, cancel := context.WithTimeout(ctx, c.app.cfg.revokeDrainTimeout)
		if err := c.d.waitIdle(dctx, pss); err != nil {
			c.log.Warn("tidemark: revoke drain bound passed; committing what finished", "err", err, "partitions", revoked)
			cause = errRevokeBound
		}
		cancel()
	}
	for _, ps := range pss {
		ps.cancel(cause)
	}
	c.finalMarks(pss)
	if c.finalStarted.Load() { // a fence of the final commit may end the session before it returns
		select {
		case <-c.finalDone:
		case <-time.After(commitTimeout):
		}
	}
	if c.committedFinal.Load() {
		// After Shutdown's final commit, leaving the group (or a fenced session that franz-go ends
		// first, before Shutdown leaves it: then its commit would be refused again on Kafka, and
		// kfake took it) commits nothing: that commit succeeded, was fenced, or passed its own
		// bound, which another commit would pay twice (DESIGN §3.7). After a commit that was
		// refused at once, this one tries again.
		return
	}
	cctx, cancel := commitContext(ctx)
	defer cancel()
	if err := c.commitMarked(cctx); err != nil {
		c.log.Warn("tidemark: commit on revoke failed", "err", err, "partitions", revoked)
	}
}

// finalMarks marks the last position of partitions that are leaving (Tracked: the watermark, and
// their trackers are reset; Auto: the record after the highest one done) and seals them, so
// completions that arrive later are stale and never marked.
func (c *consumer) finalMarks(pss []*partState) {
	c.markMu.Lock()
	defer c.markMu.Unlock()
	offs := make(map[string]map[int32]kgo.EpochOffset)
	for _, ps := range pss {
		if ps.sealed.Swap(true) { // the committer marks nothing here from now on
			continue // sealed already (shutdown, then the revoke of leaving the group): marked then
		}
		if ps.trk == nil { // Auto: what the committer has not marked yet
			if eo, ok := ps.moved(); ok {
				addOffset(offs, ps.tp, eo)
			}
			continue
		}
		if w, ok := ps.trk.Watermark(); ok {
			addOffset(offs, ps.tp, kgo.EpochOffset{Epoch: w.Epoch, Offset: w.Offset})
		}
		ps.trk.Reset()
	}
	c.markLocked(offs)
}

// onLost drops lost partitions at once: no drain, no marks, no commit; their handlers' contexts are
// cancelled (DESIGN §3.7).
func (c *consumer) onLost(_ context.Context, _ *kgo.Client, lost map[string][]int32) {
	if len(lost) == 0 {
		return
	}
	c.log.Warn("tidemark: partitions lost; in-flight work will not be committed here", "partitions", lost)
	c.markMu.Lock()
	pss := c.d.detach(lost)
	for _, ps := range pss {
		ps.sealed.Store(true)
		if ps.trk != nil {
			ps.trk.Reset()
		}
	}
	c.markMu.Unlock()
	if c.txnMode {
		c.revokes.Add(1) // later losses and revokes in this transaction may not reach us (ownership.go)
		c.abortCurrentWindow(errRevokedWindow)
	}
	c.obs.Rebalanced(RebalancedEvent{Group: c.group, Kind: "lost", Partitions: lost})
	for _, ps := range pss {
		ps.cancel(errLost)
	}
}

// abortCurrentWindow aborts the window records are being polled into, if any.
func (c *consumer) abortCurrentWindow(reason error) {
	c.d.mu.Lock()
	tw := c.d.win
	c.d.mu.Unlock()
	c.abortWindow(tw, reason)
}
