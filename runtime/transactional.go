package runtime

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/txn"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

var (
	// ErrFenced is returned by Run (wrapped with the transactional id) when another live instance
	// uses the subscription's transactional id: Kafka fenced this one (DESIGN §3.4).
	ErrFenced = errors.New("tidemark: transactional id fenced by another instance")

	// ErrWindowClosed is returned by a publish made with a handler's ctx after that handler's
	// Transactional window ended (it was aborted or timed out): nothing may leak into the next
	// transaction.
	ErrWindowClosed = txn.ErrClosed

	errRetryInWindow = errors.New("tidemark: a handler asked for a retry: the window is read again")
	errCopyNotDue    = errors.New("tidemark: a retry copy was polled before it was due")
	errWindowStalled = errors.New("tidemark: window timeout passed before its records settled")
	errRevokedWindow = errors.New("tidemark: a partition was revoked or lost during the window")
	errRewound       = errors.New("tidemark: a partition was fetched again from a lower offset (a log truncation) during the window")
	errSpentInWindow = errors.New("tidemark: attempts spent in aborted windows")
)

// maxSessionFailures is how many Begin/End failures in a row fail the App, once they have also gone
// on for the group's session timeout (sessionFailures).
const maxSessionFailures = 5

// sessionFailures counts a Transactional subscription's Begin/End failures in a row.
type sessionFailures struct {
	n     int
	since time.Time // the first of them
}

// txnWindow is one transaction: its records' barrier (txn.Window), the session it writes to, and
// the handlers' ctx, which carries the window so Publish routes into the transaction.
type txnWindow struct {
	w    *txn.Window
	sess *kgo.GroupTransactSession
	ctx  context.Context
	c    *consumer
}

type windowKey struct{}

func (c *consumer) newWindow() *txnWindow {
	tw := &txnWindow{w: txn.New(c.workCtx), sess: c.sess, c: c}
	tw.ctx = context.WithValue(tw.w.Context(), windowKey{}, tw)
	return tw
}

// windowOf returns the Transactional window a handler's ctx belongs to, if any.
func windowOf(ctx context.Context) *txnWindow {
	tw, _ := ctx.Value(windowKey{}).(*txnWindow)
	return tw
}

// publish produces r inside the window's transaction and waits for the brokers' acknowledgement.
// A failed produce aborts the window (franz-go would commit what succeeded; DESIGN §3.11), and so
// does a record Publish refuses (ErrInvalidRecord): a handler that ignores the error must not
// commit its window without that output.
func (tw *txnWindow) publish(ctx context.Context, r *kgo.Record) error {
	invalid := checkRecord(r, tw.defaultTopic)
	var topic string
	if r != nil {
		topic = r.Topic
	}
	if cause := tw.w.Aborted(); cause != nil {
		return fmt.Errorf("tidemark: publish to %q: %w: %w", topic, ErrWindowClosed, cause)
	}
	if tw.w.Closed() { // its transaction is ending or ended
		return fmt.Errorf("tidemark: publish to %q: %w", topic, ErrWindowClosed)
	}
	pubs := publishesOf(ctx)
	if pubs != nil {
		pubs.made.Add(1)
	}
	if invalid != nil {
		return tw.failed(pubs, topic, invalid)
	}
	own := r.Context == nil // franz-go sets it to ctx: cleared in the promise
	done := make(chan error, 1)
	slots := tw.c.txnSlots
	// Outside the window's guard, so that Close does not wait for it. A publish that fails here
	// after the window closed had a ctx kept past its window's end: there is nothing to abort.
	err := acquireSlot(ctx, slots, tw.c.app.cfg.queueTimeout)
	if err != nil && tw.w.Closed() {
		return fmt.Errorf("tidemark: publish to %q: %w: %w", topic, ErrWindowClosed, err)
	}
	if err == nil {
		pending := &tw.c.app.prod.pending // App.Pending counts these publishes too
		if err = tw.w.Produce(func() {
			pending.Add(1)
			tw.sess.Produce(ctx, r, func(_ *kgo.Record, err error) {
				if own {
					r.Context = nil // so r can be published again, in the next window, with its own ctx
				}
				<-slots
				pending.Add(-1)
				done <- err
			})
		}); err != nil {
			<-slots
			return fmt.Errorf("tidemark: publish to %q: %w", topic, err)
		}
		err = awaitProduce(ctx, done) // ctx ended first (ErrUnconfirmed): the window aborts below, whatever comes of r
	}
	if err != nil {
		return tw.failed(pubs, topic, err)
	}
	return nil
}

// failed aborts tw for a publish to topic that failed with err, counting it as the handler call's
// failed publish (pubs) unless tw had aborted already (it may have failed because of that abort:
// its ctx ended), and returns err.
func (tw *txnWindow) failed(pubs *publishes, topic string, err error) error {
	err = fmt.Errorf("tidemark: publish to %q in a transaction: %w", topic, err)
	if pubs != nil && tw.w.Aborted() == nil {
		pubs.failed.CompareAndSwap(nil, &err)
	}
	tw.c.abortWindow(tw, err)
	return err
}

// defaultTopic returns the kgo.DefaultProduceTopic of the window's session, "" if none: from
// ClientOpts, ProducerOpts or the subscription's Config (helper-117: one in Config was ignored).
func (tw *txnWindow) defaultTopic() string {
	t, _ := tw.sess.Client().OptValue(kgo.DefaultProduceTopic).(string)
	return t
}

// publishes is what one handler call (a record's, or a whole batch's) published into its
// Transactional window with its ctx: a failed attempt that published must abort the window, so
// that only a successful attempt's outputs commit (DESIGN §3.4).
type publishes struct {
	made   atomic.Int32          // publishes made, the ones refused by an aborted window excepted
	failed atomic.Pointer[error] // the first one that failed while the window was open: it aborted it
	// othersAbort is set when the call returned: the window had aborted already, for another
	// record, so the call's failures may be its consequence (a refused publish, a cancelled ctx).
	// A batch's own elements settle after it is set, so one failing element's abort is not taken
	// for another's.
	othersAbort bool
}

type publishesKey struct{}

// withPublishes returns ctx with p, to count the publishes made with it.
func withPublishes(ctx context.Context, p *publishes) context.Context {
	return context.WithValue(ctx, publishesKey{}, p)
}

// publishesOf returns the publishes a handler's ctx counts on, or nil.
func publishesOf(ctx context.Context) *publishes {
	p, _ := ctx.Value(publishesKey{}).(*publishes)
	return p
}

// reset prepares p for another handler call.
func (p *publishes) reset() {
	p.made.Store(0)
	p.failed.Store(nil)
	p.othersAbort = false
}

// returned sets othersAbort once the handler call of a record of tw has returned.
func (p *publishes) returned(tw *txnWindow) {
	p.othersAbort = tw != nil && tw.w.Aborted() != nil && p.failed.Load() == nil
}

// abortWindow aborts tw and drops its queued records: the whole window is read again from the
// committed offsets after the abort. tw may be a window that has ended already (a late handler's):
// the current window's records stay queued.
func (c *consumer) abortWindow(tw *txnWindow, reason error) {
	if tw == nil {
		return
	}
	tw.w.Abort(reason)
	c.d.dropQueued(tw)
}

// ctxOf is the ctx a record's handler runs with: its window's in the Transactional mode, its
// partition's otherwise.
func (c *consumer) ctxOf(it *item) context.Context {
	if it.win != nil {
		return it.win.ctx
	}
	return it.ps.ctx
}

// pollTxn is the Transactional poll loop (DESIGN §3.4): Begin; poll for CommitInterval; seal the
// window and wait, up to WindowTimeout, until every record polled in it has settled and its
// outputs are produced; End with TryCommit (TryAbort if anything asked for an abort); repeat.
// (false, nil) from End is a rebalance abort; ProducerFenced is fatal; other errors rebuild the
// session from the committed offsets, with backoff, and fail the App after repeated failures.
// When ctx ends it runs a last window's barrier and End, then returns.
//
// After an abort the next window admits half as many records as the aborted one (at least one), and
// each committed window doubles the admission again: a record that fails now and then can abort
// only small windows, so the subscription always makes progress.
func (c *consumer) pollTxn(ctx, base context.Context) {
	aborts := 0
	var failures sessionFailures
	limit := 0 // records a window admits; 0 = no limit
	for {
		if err := c.sess.Begin(); err != nil {
			if !c.sessionFailed(ctx, err, &failures) {
				return
			}
			continue
		}
		tw := c.newWindow()
		c.d.setWindow(tw)
		end := time.Now().Add(c.cfg.commitInterval)
		admitted := 0
		for ctx.Err() == nil && tw.w.Aborted() == nil && time.Now().Before(end) && (limit == 0 || admitted < limit) &&
			c.recreated.Load() == nil {
			n := c.app.cfg.maxPollRecords
			if limit > 0 {
				n = min(n, limit-admitted)
			}
			pctx, cancel := context.WithDeadline(ctx, end)
			if !c.d.waitRoom(pctx) { // back-pressure held the poll loop off until the window's end
				cancel()
				continue
			}
			fs := c.sess.PollRecords(pctx, n)
			cancel()
			admitted += fs.NumRecords()
			if fs.IsClientClosed() {
				c.sess.AllowRebalance()
				tw.w.Abort(kgo.ErrClientClosed)
				break
			}
			c.fetchErrors(fs)
			events, _, err := c.d.push(fs, n)
			c.sess.AllowRebalance()
			for _, ev := range events {
				c.obs.Delivered(ev)
			}
			if err != nil {
				c.failTrackerFull(err)
			}
		}
		tw.w.Seal()
		if err := c.waitBarrier(base, tw); err != nil && tw.w.Aborted() == nil {
			c.abortWindow(tw, err)
		}
		try := kgo.TryCommit
		if tw.w.Aborted() != nil {
			try = kgo.TryAbort
			c.abortWindow(tw, tw.w.Aborted()) // cancels the handlers and drops what is queued
		}
		tw.w.Close() // late produces are refused from here on
		ectx, cancel := context.WithTimeout(base, c.cfg.windowTimeout)
		revokes := c.revokes.Load() // checkOwnership: what reached us before this End
		committed, err := c.sess.End(ectx, try)
		cancel()
		tw.w.Release() // its handlers' ctx: done with, and no longer held by c.workCtx
		c.lastAbort, c.lastEnd = tw.w.Aborted(), err
		if err == nil {
			failures = sessionFailures{} // the session works: an abort ends a run of failures too
		}
		switch {
		case err != nil:
			if !c.sessionFailed(ctx, err, &failures) {
				return
			}
		case committed:
			aborts = 0
			c.forgetTxnTries(c.sess.Client().CommittedOffsets())
			if limit > 0 {
				if limit *= 2; limit >= c.app.cfg.maxPollRecords*64 {
					limit = 0
				}
			}
		case try == kgo.TryAbort:
			aborts++
			limit = max(1, admitted/2)
			c.log.Warn("tidemark: transaction aborted; the window is read again", "err", tw.w.Aborted(), "aborts", aborts)
		default:
			c.log.Info("tidemark: transaction aborted by a rebalance; the window is read again")
		}
		c.checkOwnership(ctx, revokes)
		if ctx.Err() != nil {
			return
		}
		if topic := c.recreated.Load(); topic != nil { // the window has ended: make the session again
			err := fmt.Errorf("%w: %s: topic %q", ErrTopicRecreated, c.sub, *topic)
			if !c.sessionFailed(ctx, err, &failures) {
				return
			}
			continue
		}
		if aborts > 0 && try == kgo.TryAbort {
			if !sleepCtx(ctx, c.cfg.backoff(aborts, tw.w.Aborted())) {
				return
			}
		}
	}
}

// waitBarrier waits until every record of tw has settled and its outputs are produced: nil, or
// tw's abort cause; errWindowStalled once WindowTimeout has passed; errShutdownBound once
// Shutdown's ctx has ended after polling stopped (DESIGN §3.4: the last window aborts if the
// drain did not finish; its records are read again by the next owner).
func (c *consumer) waitBarrier(base context.Context, tw *txnWindow) error {
	ctx, cancelTimeout := context.WithTimeoutCause(base, c.cfg.windowTimeout, errWindowStalled)
	defer cancelTimeout()
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	stop := context.AfterFunc(c.barrier, func() { cancel(context.Cause(c.barrier)) })
	defer stop()
	return tw.w.Wait(ctx)
}

// sessionFailed handles an error from Begin or End: fencing (of the transactional id, or of the
// static member: ErrInstanceFenced) is fatal; other errors rebuild the session after a backoff, and
// fail the App once maxSessionFailures of them in a row have gone on for the group's session
// timeout (kgo.SessionTimeout, 45 s by default): a broker restarting, an outage shorter than the
// session timeout, is waited for (a longer one may fail the App, where Tracked rides it out:
// docs/operations.md, Broker outages). It reports whether to go on.
func (c *consumer) sessionFailed(ctx context.Context, err error, failures *sessionFailures) bool {
	if errors.Is(err, kerr.ProducerFenced) {
		c.app.fail(fmt.Errorf("%w: %s: transactional id %q: %w", ErrFenced, c.sub, c.sub.mode.txnID, err))
		return false
	}
	if errors.Is(err, kerr.TransactionalIDAuthorizationFailed) { // no ACL on the id: not another instance (helper-143)
		c.app.fail(fmt.Errorf("tidemark: %s: transactional id %q: the cluster refused it: %w", c.sub, c.sub.mode.txnID, err))
		return false
	}
	if errors.Is(err, kerr.FencedInstanceID) { // a TxnOffsetCommit's: a new session would fence the newer member
		c.instanceFenced(c.cl, err)
		return false
	}
	if failures.n++; failures.n == 1 {
		failures.since = time.Now()
	}
	c.log.Error("tidemark: transaction failed; rebuilding the session from the committed offsets",
		"err", err, "failures", failures.n)
	session, _ := c.cl.OptValue(kgo.SessionTimeout).(time.Duration)
	if failures.n >= maxSessionFailures && time.Since(failures.since) >= session {
		c.app.fail(fmt.Errorf("tidemark: %s: %d transactions failed in a row over %v: %w",
			c.sub, failures.n, time.Since(failures.since).Round(time.Millisecond), err))
		return false
	}
	if !sleepCtx(ctx, c.cfg.backoff(failures.n, err)) {
		return false
	}
	old := c.sess
	old.CloseAllowingRebalance()
	c.recreated.Store(nil) // the new client loads every topic afresh
	sess, nerr := kgo.NewGroupTransactSession(c.clientOpts()...)
	if nerr != nil {
		c.app.fail(fmt.Errorf("tidemark: %s: rebuild the transactional session: %w", c.sub, nerr))
		return false
	}
	c.d.mu.Lock()
	c.sess, c.cl = sess, sess.Client()
	c.d.mu.Unlock()
	return true
}

// sleepCtx waits d or until ctx ends; false if ctx ended.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(max(d, 0))
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// retryAbortsWindow handles, in the Transactional mode, a failed delivery that must abort its
// window: a retry with no copy policy (DESIGN §3.4); any failed delivery that already published
// into the window (its outputs must not commit: only a successful attempt's do); and any delivery
// whose own publish failed (the failure aborted the window already), whatever it returned. A
// failure that may be the consequence of another record's abort (pubs.othersAbort) is settled
// without counting. The failed delivery is counted for the record's offset, so its next
// delivery's Attempt grows, the Backoff grows with it, and MaxAttempts applies across aborts; once
// the attempts are spent (with DeadLetter alone: after the first), the record is settled (dead
// letter or drop) without the handler when it is read again. A RetryAfter(d) pauses the record's
// partition for d, as its copy would have (helper-113: it was read again after the abort's backoff,
// about 100 ms). It reports whether it handled the delivery.
func (c *consumer) retryAbortsWindow(it *item, ev *SettledEvent, pubs *publishes, cause error, after time.Duration) bool {
	var pubErr error
	if p := pubs.failed.Load(); p != nil {
		pubErr = *p
	}
	if pubErr != nil && cause == nil {
		cause = pubErr // it swallowed the error of the publish that aborted the window
	}
	if pubs.othersAbort {
		// The window is already being read again for another reason (this failure may be its
		// consequence: a refused publish): this attempt does not count.
		ev.Outcome, ev.Err = OutcomeRetry, cause
		c.settle(it, ev)
		return true
	}
	copies := c.cfg.maxAttempts > 0 || after > 0 || c.cfg.deadLetter != ""
	if pubErr == nil && copies && pubs.made.Load() == 0 {
		return false // a copy (or dead letter) in the window: nothing of this attempt leaks
	}
	spent := c.cfg.maxAttempts > 0 && ev.Attempt >= c.cfg.maxAttempts ||
		c.cfg.maxAttempts == 0 && after <= 0 && c.cfg.deadLetter != "" // as resolve: dead-lettered at once
	c.countTxnTry(it, spent, cause)
	ev.Outcome, ev.Err = OutcomeRetry, cause
	c.abortWindow(it.win, fmt.Errorf("%w: %w", errRetryInWindow, cause))
	if after > 0 && !spent {
		c.d.delay(it.ps.tp, time.Now().Add(after)) // its partition waits d, as for a copy (helper-113)
	}
	c.settle(it, ev)
	return true
}

// countTxnTry counts a failed delivery of it in an aborted window; spent marks its attempts spent,
// with cause, the failure that spent them.
func (c *consumer) countTxnTry(it *item, spent bool, cause error) {
	key := it.ps.tp
	c.txnMu.Lock()
	defer c.txnMu.Unlock()
	if c.txnTried == nil {
		c.txnTried, c.txnGone = map[tp]map[int64]int{}, map[tp]map[int64]error{}
	}
	if c.txnTried[key] == nil {
		c.txnTried[key] = map[int64]int{}
	}
	c.txnTried[key][it.off]++
	if spent {
		if c.txnGone[key] == nil {
			c.txnGone[key] = map[int64]error{}
		}
		c.txnGone[key][it.off] = cmp.Or(cause, errSpentInWindow)
	}
}

// forgetTxnTries drops the counts of offsets below the committed ones, whose records are settled,
// and of partitions no longer owned (revoked or lost: their next owner counts their attempts anew;
// helper-87: they were kept for good).
func (c *consumer) forgetTxnTries(committed map[string]map[int32]kgo.EpochOffset) {
	c.txnMu.Lock()
	none := len(c.txnTried) == 0
	c.txnMu.Unlock()
	if none {
		return
	}
	owned := make(map[tp]bool)
	for _, ps := range c.d.owned() { // d.mu is never taken under txnMu
		owned[ps.tp] = true
	}
	c.txnMu.Lock()
	defer c.txnMu.Unlock()
	for key, offs := range c.txnTried {
		if eo, ok := committed[key.topic][key.partition]; ok {
			for off := range offs {
				if off < eo.Offset {
					delete(offs, off)
					delete(c.txnGone[key], off)
				}
			}
		}
		if len(offs) == 0 || !owned[key] {
			delete(c.txnTried, key)
			delete(c.txnGone, key)
		}
	}
}
