package runtime

import (
	"context"
	"fmt"
	"math"
	"runtime/debug"
	"slices"
	"time"

	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/tracker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// laneTake is how many records of one unit of order (a partition, a key) a lane takes at once for
// a Handler: it handles them one after another, as it would one take at a time, and hands them
// back to the dispatcher under one lock.
const laneTake = 64

// takeSlice is how long a Handler's take runs on while other units wait for a lane. Once it has
// passed (read after the take's 2nd, 8th, 16th, 32nd and 48th record: sliceChecks), the take stops
// after the record in hand as soon as a unit waits, and its unit goes to the back of the ready
// list, so slow handlers share the lanes a record or two at a time instead of 64 (helper-97: with
// 20 ms handlers, 4 lanes held 4 keys for 1.3 s while a partition's other keys, and another
// partition, waited; the low watermark stayed behind them). Fast handlers finish a whole take well
// within it: one lock per 64 records still. (helper-118: the clock started only at a check that saw
// a unit waiting, and was read only there, so a unit that came after the 8th record of a take of
// 20 ms handlers waited for up to 56 of them. helper-119: with no read after the 32nd, a take whose
// first 32 records were fast ran its slow rest whole; now a unit waits at most 16 records past the
// slice, when a take's records turn slow after a fast start.)
const takeSlice = time.Millisecond

// sliceChecks has bit n set for the n-th record after which a take reads its clock (time.Now,
// 20 to 70 ns: six per take of 64 at most, none once the slice has passed): it starts after the
// first, whether or not a unit waits.
const sliceChecks uint64 = 1<<1 | 1<<2 | 1<<8 | 1<<16 | 1<<32 | 1<<48

// lane is one worker goroutine: it takes ready records from the dispatcher, runs the handler and
// settles the outcomes, then finishes the take, until the dispatcher stops.
func (c *consumer) lane() {
	n := laneTake
	switch {
	case c.bh != nil:
		n = max(c.batchN, 1)
	case c.cfg.ordering == Unordered:
		n = 1 // records of no common unit: any idle lane may take the next one
	}
	var dl Delivery // the handler's argument, valid for one call: reused
	// running is the records of the take in a handler, or being settled after it: set around
	// each call (handleTake, handleBatch), nil between them. A handler that calls runtime.Goexit
	// ends this goroutine with it set: laneExited.
	var running []*item
	items, ok := c.d.take(make([]*item, 0, n), n)
	exited := true
	defer func() {
		if !exited {
			return
		}
		// A panic unwinding the lane (an Observer's, or the runtime's own: a handler's is
		// recovered in invoke) ends the process as it is, not reported as a handler's Goexit
		// (helper-80). Re-panicking keeps its traceback ("[recovered, repanicked]").
		if v := recover(); v != nil {
			panic(v)
		}
		c.laneExited(items, running)
	}()
	for ok {
		handled := len(items)
		if c.bh != nil {
			c.handleBatch(items, &running)
			c.markBatch(items)
		} else {
			handled = c.handleTake(items, &dl, &running)
			dl.rec, dl.reply = nil, nil // a kept record would keep its fetch buffer alive
		}
		running = nil // not cleared by a deferred call: it must still be set as Goexit runs them
		items, ok = c.d.finishTake(items, handled, n)
	}
	exited = false
}

// laneExited runs as runtime.Goexit ends a lane's goroutine, which nothing can stop. If a handler
// called it (running, the records in the handler, is set), those records are held (handlerExited),
// what ran before them stays settled, what was not handled goes back to its unit, and the take is
// finished. Otherwise an Observer's method called it between handlers (under the dispatcher's lock,
// maybe, in the middle of finishing the take): the take is left as it is. Either way the App fails
// with ErrHandlerExited; no lane replaces this one.
func (c *consumer) laneExited(items, running []*item) {
	if len(running) == 0 {
		c.app.fail(fmt.Errorf("tidemark: a lane ended in runtime.Goexit outside a handler (an Observer's method?): %w", ErrHandlerExited))
		return
	}
	c.handlerExited(running)
	handled := len(items) // a batch: all of it was in the handler, or settled before it
	if c.bh == nil {
		handled = slices.Index(items, running[0]) + 1
	}
	c.d.finishTake(items, handled, 0)
}

// handlerExited holds the records whose handler called runtime.Goexit: as under PanicFail,
// whatever OnPanic says (the lane that would run them again is ending), they are never committed
// and the App fails with a *PanicError whose Value is ErrHandlerExited. One Error line names the
// first record (and the batch's size); each record gets its OutcomePanic event.
func (c *consumer) handlerExited(items []*item) {
	perr := c.panicError(items[0], ErrHandlerExited, debugStack())
	attempt, _ := c.attempt(items[0])
	kv := []any{"stack", string(perr.Stack)}
	if c.bh != nil {
		kv = append(kv, "batch", len(items))
	}
	c.log.Error("tidemark: handler called runtime.Goexit instead of returning", c.recAttrs(items[0], attempt, kv...)...)
	for _, it := range items {
		attempt, _ := c.attempt(it)
		c.abortWindow(it.win, perr)
		ev := c.event(it, attempt)
		ev.Outcome, ev.Err = OutcomePanic, perr
		c.settled(&ev)
		it.act = actHold
	}
	c.app.fail(perr)
}

// handleTake handles a take's records one after another, in order, marks each (Auto) once its
// handler has returned, and returns how many it handled. It stops after a record that must run
// again before those behind it (an in-place retry, a panic under PanicFail), and before a record
// that may no longer run (its partition was revoked or lost, the App is stopping, its
// Transactional window aborted, a rewind made it stale), its first one included if stale (a
// parked retry or copy fallen due, a take grabbed just before the rewind): then it handles none.
// It also stops, once it has run for takeSlice, after the first record that ends while another
// unit waits for a lane.
// running is set to the record in the handler, or being settled after it (see lane).
// Tracked: records acked on the fast path (handle) are completed with CompleteDeferred, and the
// watermark moves past them once, when the take returns (a take is one unit: one partition).
func (c *consumer) handleTake(items []*item, dl *Delivery, running *[]*item) int {
	if trk := items[0].ps.trk; trk != nil {
		defer func() {
			trk.Advance()
			c.kick() // not only if Advance moved it: a reader (Oldest) may have moved it first
		}()
	}
	var sliceStart time.Time // set at the first check (takeSlice)
	spent := false           // takeSlice has passed: from here a waiting unit stops the take
	for i, it := range items {
		if i > 0 && !c.d.runnable(it) || i == 0 && it.stale() { // finishTake drops them
			return i
		}
		*running = items[i : i+1]
		c.handle(it, dl)
		if it.act != actDone {
			return i + 1
		}
		c.markDone(it)
		if c.observed { // held until finishTake: not in flight for the events (partState.inFlight)
			it.ps.settling.Add(1)
		}
		n := i + 1
		if n == len(items) { // the take ends here anyway: no clock to read (a take of one, Unordered's)
			break
		}
		if !spent && sliceChecks>>n&1 != 0 {
			spent = sliceSpent(&sliceStart)
		}
		if spent && c.d.waiting.Load() {
			return n // finishTake puts the rest back: other units take their turn first
		}
	}
	return len(items)
}

// sliceSpent reports whether takeSlice has passed since *start, which it sets on its first call
// (a take's clock starts after its first record: a slow first record does not count).
func sliceSpent(start *time.Time) bool {
	now := time.Now()
	if start.IsZero() {
		*start = now
		return false
	}
	return now.Sub(*start) >= takeSlice
}

// handle runs one record through the handler and settles it (DESIGN §3.2, §3.8); it.act says how
// the dispatcher must finish it. d is the lane's Delivery, filled anew for the call (nil: a new
// one); with one, handle may complete the record without moving the watermark
// (CompleteDeferred): the caller moves it (handleTake).
func (c *consumer) handle(it *item, d *Delivery) {
	ps := it.ps
	if it.control || it.foreign {
		ev := c.event(it, 0)
		ev.Outcome = OutcomeControl
		if it.foreign { // helper-136: a record forwarded with its x-tidemark- headers is one too
			ev.Outcome = OutcomeForeignCopy
			c.log.Debug("tidemark: another group's retry copy settled without the handler",
				c.recAttrs(it, 0, "copy_group", retry.GroupOf(it.rec))...)
		}
		c.settle(it, &ev)
		return
	}
	attempt, spent := c.attempt(it)
	if spent != nil { // spent in an aborted window: settled without the handler (DESIGN §3.4)
		ev := c.event(it, attempt-1) // as its last delivery, the one that spent it: counted among the failed already
		c.resolve(it, &ev, kindRetry, spent, 0)
		return
	}
	inTake := d != nil // handleTake's: it moves the watermark after the take (Advance)
	if d == nil {
		d = new(Delivery)
	}
	d.rec, d.group, d.generation, d.attempt, d.reply = it.rec, c.group, ps.gen, attempt, nil
	if it.win != nil { // only a Transactional window's publishes are counted
		d.pubs.reset()
	}
	var start time.Time
	if c.observed {
		start = time.Now()
	}
	perr, err := c.invoke(c.ctxOf(it), it, d)
	if perr == nil && err == nil && it.win == nil && !c.observed {
		// Acked, with no event to build: most records. In a take, Tracked's watermark moves past
		// them once, after the take (handleTake).
		if ps.trk != nil && inTake {
			ps.trk.CompleteDeferred(it.slot)
			it.act = actDone
		} else {
			c.complete(it)
		}
		return
	}
	ev := c.event(it, attempt)
	if c.observed {
		ev.Duration = time.Since(start)
	}
	if perr != nil {
		c.log.Error("tidemark: handler panicked", c.recAttrs(it, ev.Attempt, "panic", fmt.Sprint(perr.Value), "stack", string(perr.Stack))...)
		switch c.cfg.panicPolicy {
		case PanicRetry:
			err = Retry(perr)
		case PanicDrop:
			err = Drop(perr)
		default:
			ev.Outcome, ev.Err = OutcomePanic, perr
			c.abortWindow(it.win, perr)
			c.settled(&ev)
			it.act = actHold // never committed; the App shuts down
			c.app.fail(perr)
			return
		}
	}
	d.pubs.returned(it.win)
	c.conclude(it, &ev, err, c.ctxOf(it), &d.pubs)
}

// event returns the SettledEvent of it's delivery attempt, its outcome still to set.
func (c *consumer) event(it *item, attempt int) SettledEvent {
	return SettledEvent{Group: c.group, Topic: it.ps.topic, Partition: it.ps.partition, Offset: it.off,
		Generation: it.ps.gen, Attempt: attempt}
}

// attempt returns the number of it's delivery about to run (DESIGN §3.3, §3.4): its retry count
// (copies), its in-place retries and, in the Transactional mode, its failed deliveries in aborted
// windows, plus 1. spent is, when its attempts were spent in an aborted window, the failure of
// the attempt that spent them (what its handler returned, or its failed publish); nil otherwise.
// The sum saturates at math.MaxInt (attemptSum).
func (c *consumer) attempt(it *item) (attempt int, spent error) {
	tried := 0
	if it.win != nil {
		c.txnMu.Lock()
		defer c.txnMu.Unlock()
		tried, spent = c.txnTried[it.ps.tp][it.off], c.txnGone[it.ps.tp][it.off]
	}
	return int(attemptSum(math.MaxInt, int64(it.copies), int64(it.inPlace), int64(tried))), spent
}

// attemptSum returns copies + inPlace + tried + 1, at most limit (math.MaxInt for an int): a forged
// retry count of retry.MaxCount on a 32-bit platform must not wrap to a negative attempt, which no
// MaxAttempts cap reaches. The parts are not negative.
func attemptSum(limit, copies, inPlace, tried int64) int64 {
	return min(copies+inPlace+tried+1, limit)
}

// conclude settles a handled record by the error its handler (or its batch's, for its element)
// returned. ctx is the ctx the handler ran with, pubs what the call published into a Transactional
// window with it.
func (c *consumer) conclude(it *item, ev *SettledEvent, err error, ctx context.Context, pubs *publishes) {
	kind, after, cause := classify(err)
	switch {
	case kind != kindAck && it.win == nil && ctx.Err() != nil:
		// The runtime cancelled the handler (a revoke's or Shutdown's drain bound passed, the
		// partition was lost) and it returned an error, a Drop too (its cause is most likely the
		// cancellation itself): it did not finish. It stays in flight, uncommitted, for the next
		// owner: not a retry copy, a dead letter, a drop or (Auto) a refused retry that commits
		// past it (DESIGN §3.7).
		ev.Err = cause
		c.retryInPlace(it, ev)
	case it.win != nil && (kind == kindRetry || pubs.failed.Load() != nil) &&
		c.retryAbortsWindow(it, ev, pubs, cause, after):
	default:
		c.resolve(it, ev, kind, cause, after)
	}
}

// settle completes a record that is done (complete) and reports ev.
func (c *consumer) settle(it *item, ev *SettledEvent) {
	c.complete(it)
	c.settled(ev)
}

// complete completes a record that is done: its offset may now be committed.
func (c *consumer) complete(it *item) {
	if it.ps.trk != nil && it.ps.trk.Complete(it.slot) == tracker.Completed {
		c.kick()
	}
	it.act = actDone
}

// settled passes ev to the Observer, unless it is the no-op one (the event is not copied then).
func (c *consumer) settled(ev *SettledEvent) {
	if c.observed {
		c.obs.Settled(*ev)
	}
}

// invoke calls the handler, recovering a panic into a *PanicError (a runtime.Goexit: see lane).
func (c *consumer) invoke(ctx context.Context, it *item, d *Delivery) (perr *PanicError, err error) {
	defer func() {
		if v := recover(); v != nil {
			perr = c.panicError(it, v, debugStack())
		}
	}()
	if topic := c.cfg.replyTopic; topic != "" {
		d.reply = func(ctx context.Context, v []byte) error {
			return c.app.Publish(ctx, &kgo.Record{Topic: topic, Key: it.rec.Key, Value: v})
		}
	}
	if it.win != nil { // publishes made with this ctx, and their failures, are counted in d.pubs
		ctx = withPublishes(ctx, &d.pubs)
	}
	return nil, c.h.HandleDelivery(ctx, d)
}

// markDone marks, under Auto, a record that is done and follows only done records of its take,
// for franz-go's autocommit (DESIGN §3.2, as docs/commit-modes.md words it: a record is marked
// once its handler has returned). It raises the partition's done position (partState.markDone:
// a compare-and-swap, no lock) and wakes the committer, which hands the moved positions to
// franz-go in one MarkCommitOffsets (at most every 10 ms; at once on a revoke or shutdown,
// finalMarks). A partition whose final marks were made (revoked) or that was lost is sealed: the
// committer marks nothing more for it, since another member may own it (DESIGN §3.7). A stale
// record (item.stale: one in its handler as a rewind came) is not marked: its old leader epoch's
// position would pass the records the rewind fetches again, not handled yet (partState.markDone
// checks after loading its cell, which a rewind renews). A batch's element marks the done elements
// it carries with it (item.last).
func (c *consumer) markDone(it *item) {
	if !c.tracked && !c.txnMode && it.ps.markDone(it.last(), it.rewinds) {
		c.kick()
	}
}

// markBatch marks, under Auto, what a batch's settled elements allow: per partition, every done
// element before the first one that is not done (markDone keeps the highest). An element not done
// (an in-place retry: its dead letter or copy was not produced, its handler was cancelled) carries
// the position of the done elements behind it, up to the next one not done (item.after), and
// marks it once it is done itself, in a later batch, or carries it on to an element not done
// before it there (helper-109: the acked elements behind a failed dead letter were never marked,
// and a graceful Shutdown committed below them). A stale element is neither marked nor carried.
func (c *consumer) markBatch(items []*item) {
	if c.tracked || c.txnMode {
		return
	}
	var behind []*item // per partition, the last element not done so far: the done ones wait behind it
	for _, it := range items {
		i := slices.IndexFunc(behind, func(w *item) bool { return w.ps == it.ps })
		switch {
		case it.act != actDone && i < 0:
			behind = append(behind, it)
		case it.act != actDone:
			behind[i] = it
		case it.stale():
		case i >= 0:
			behind[i].carry(it.last())
		default:
			c.markDone(it)
		}
	}
}

// last returns the position (leader epoch, offset) of the highest record it's mark covers: its
// own, or that of the done elements it carries (item.after), whichever is higher in franz-go's
// order (kgo.EpochOffset.Less).
func (it *item) last() kgo.EpochOffset {
	own := kgo.EpochOffset{Epoch: it.epoch, Offset: it.off}
	if carried := (kgo.EpochOffset{Epoch: it.afterEpoch, Offset: it.after - 1}); it.after > 0 && own.Less(carried) {
		return carried
	}
	return own
}

// carry raises the position an element not done carries for the done elements behind it
// (item.after) to pos, a done record's position.
func (it *item) carry(pos kgo.EpochOffset) {
	if it.after == 0 || (kgo.EpochOffset{Epoch: it.afterEpoch, Offset: it.after - 1}).Less(pos) {
		it.after, it.afterEpoch = pos.Offset+1, pos.Epoch
	}
}

func (c *consumer) recAttrs(it *item, attempt int, kv ...any) []any {
	return append([]any{"topic", it.ps.topic, "partition", it.ps.partition, "offset", it.off,
		"generation", it.ps.gen, "attempt", attempt}, kv...)
}

// panicError is the *PanicError of it's handler, which panicked with v (stack: its goroutine's).
func (c *consumer) panicError(it *item, v any, stack []byte) *PanicError {
	return &PanicError{Value: v, Stack: stack, Topic: it.ps.topic, Partition: it.ps.partition, Offset: it.off}
}

// debugStack is the stack of the calling goroutine, for a *PanicError.
func debugStack() []byte { return debug.Stack() }
