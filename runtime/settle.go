package runtime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/tidemark-io/tidemark/dlq"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// resolve settles a handled record by its outcome and the registration's policy (DESIGN
// §3.2–3.3): ack completes it; drop completes it after its dead-letter copy is acknowledged (when
// a DeadLetter is declared); a retry becomes a retry copy (MaxAttempts or RetryAfter), a
// dead-letter record (spent, or DeadLetter alone), an in-place retry (Tracked, no policy), or a
// refusal (Auto, no policy).
func (c *consumer) resolve(it *item, ev *SettledEvent, kind outcomeKind, cause error, after time.Duration) {
	ev.Err = cause
	switch kind {
	case kindAck:
		ev.Outcome = OutcomeAck
		c.settle(it, ev)
		return
	case kindDrop:
		ev.Outcome = OutcomeDrop
		if errors.Is(cause, ErrDecode) {
			ev.Outcome = OutcomeDecodeFailure
		}
		if c.cfg.deadLetter != "" { // its one line says where it went, and why (helper-136)
			c.deadLetter(it, ev)
			return
		}
		if ev.Outcome == OutcomeDecodeFailure {
			c.log.Warn("tidemark: record dropped: it does not decode", c.recAttrs(it, ev.Attempt, "err", cause)...)
		} else {
			level := slog.LevelInfo
			if cause == errDropped { // Drop(nil): a filter with nothing to say, not a line per record
				level = slog.LevelDebug
			}
			if ctx := context.Background(); c.log.Enabled(ctx, level) { // no attributes built for nothing
				c.log.Log(ctx, level, "tidemark: record dropped", c.recAttrs(it, ev.Attempt, "err", cause)...)
			}
		}
		c.settle(it, ev)
		return
	}
	cfg := c.cfg
	switch {
	case cfg.maxAttempts > 0 && ev.Attempt >= cfg.maxAttempts:
		ev.Outcome = OutcomeSpent
		if cfg.deadLetter != "" {
			c.deadLetter(it, ev)
			return
		}
		c.log.Warn("tidemark: record dropped: its attempts are spent and no DeadLetter is declared",
			c.recAttrs(it, ev.Attempt, "err", cause, "max_attempts", cfg.maxAttempts)...)
		c.settle(it, ev)
	case cfg.maxAttempts > 0 || after > 0:
		c.retryCopy(it, ev, after)
	case cfg.deadLetter != "":
		ev.Outcome = OutcomeRetry
		c.deadLetter(it, ev)
	case c.txnMode: // DESIGN §3.4: the window aborts and is read again
		ev.Outcome = OutcomeRetry
		c.abortWindow(it.win, fmt.Errorf("%w: %w", errRetryInWindow, cause))
		c.settle(it, ev)
	case c.tracked:
		c.retryInPlace(it, ev)
	default:
		ev.Outcome, ev.Err = OutcomeRetryRefused, fmt.Errorf("%w: %w", ErrRetryUnsupported, cause)
		c.log.Warn("tidemark: retry refused: the record is not handled again", c.recAttrs(it, ev.Attempt, "err", cause)...)
		c.settle(it, ev)
	}
}

// retryCopy produces a retry copy due after RetryAfter's delay or the backoff for the attempt,
// and completes the original once Kafka has acknowledged the copy.
func (c *consumer) retryCopy(it *item, ev *SettledEvent, after time.Duration) {
	wait := after
	if wait <= 0 {
		wait = max(c.cfg.backoff(ev.Attempt, ev.Err), 0)
	}
	due := time.Now().Add(wait)
	cp := retry.Copy(c.original(it), c.group, ev.Attempt, due) // its deliveries so far: in place and in aborted windows too
	ctx := c.ctxOf(it)
	if c.cfg.retryTo != "" {
		cp.Topic = c.cfg.retryTo
	} else { // the source partition, explicitly: keyless records stay on it too
		cp.Topic, cp.Partition = it.ps.topic, it.ps.partition
		ctx = pinned(ctx)
	}
	cp.Context = ctx
	if err := c.app.Publish(ctx, cp); err != nil {
		c.produceFailed(it, ev, "retry copy", err)
		return
	}
	if c.txnMode { // nothing is parked across windows: the copy's partition waits instead
		c.d.delay(tp{cp.Topic, cp.Partition}, due)
	}
	ev.Outcome = OutcomeRetryCopy
	c.log.Debug("tidemark: retry copy produced", c.recAttrs(it, ev.Attempt, "err", ev.Err, "to", cp.Topic, "not_before", wait)...)
	c.settle(it, ev)
}

// deadLetter produces the record's dead-letter copy and completes the original once Kafka has
// acknowledged it.
func (c *consumer) deadLetter(it *item, ev *SettledEvent) {
	rec := dlq.Record(c.original(it), c.cfg.deadLetter, c.group, ev.Attempt, ev.Err)
	rec.Context = c.ctxOf(it)
	if err := c.app.Publish(rec.Context, rec); err != nil {
		c.produceFailed(it, ev, "dead-letter record", err, "reason", ev.Outcome.String())
		return
	}
	ev.Reason, ev.Outcome = ev.Outcome, OutcomeDeadLetter
	c.log.Warn("tidemark: record sent to the dead-letter topic",
		c.recAttrs(it, ev.Attempt, "err", ev.Err, "to", rec.Topic, "reason", ev.Reason.String())...)
	c.settle(it, ev)
}

// original returns it's record for a retry copy or a dead letter, with the topic, partition,
// offset and leader epoch it had when admitted (a handler may have changed them: publishing the
// record sets them); a copy if they changed.
func (c *consumer) original(it *item) *kgo.Record {
	r := it.rec
	if r.Topic == it.ps.topic && r.Partition == it.ps.partition && r.Offset == it.off && r.LeaderEpoch == it.epoch {
		return r
	}
	o := *r
	o.Topic, o.Partition, o.Offset, o.LeaderEpoch = it.ps.topic, it.ps.partition, it.off, it.epoch
	return &o
}

// produceFailed keeps a record whose copy could not be produced in flight and handles it again in
// place after the backoff, in every mode: never silent (DESIGN §3.3). It logs at Error, or at Warn
// when the runtime had cancelled the record's ctx (a bound passed, its partition was revoked or
// lost, its window aborted): what that stopped is reported already, and the record stays
// uncommitted for whoever reads it next (helper-126: routine stops past a tiny ShutdownTimeout
// logged Errors).
func (c *consumer) produceFailed(it *item, ev *SettledEvent, what string, err error, kv ...any) {
	// What the handler returned rides along: no other line above Debug says it until the produce
	// succeeds (helper-138: a dead letter's reason, logged only once it is sent).
	kv = append([]any{"err", err, "handler_err", ev.Err}, kv...)
	if ctx := c.ctxOf(it); ctx.Err() != nil {
		c.log.Warn("tidemark: "+what+" not produced before the record's ctx ended; the record stays uncommitted for whoever reads it next",
			c.recAttrs(it, ev.Attempt, append(kv, "cause", context.Cause(ctx))...)...)
	} else {
		c.log.Error("tidemark: "+what+" not produced; the record stays in flight and is handled again",
			c.recAttrs(it, ev.Attempt, kv...)...)
	}
	ev.Err = fmt.Errorf("tidemark: %s: %w", what, err)
	if c.txnMode {
		if it.win != nil && errors.Is(it.win.w.Aborted(), err) {
			// The copy's own failure aborted the window (not a refusal by a window another record
			// aborted): a failed delivery, counted as retryAbortsWindow counts one.
			c.countTxnTry(it, false, nil)
		}
		ev.Outcome = OutcomeRetry
		c.abortWindow(it.win, ev.Err)
		c.settle(it, ev)
		return
	}
	c.retryInPlace(it, ev)
}

// retryInPlace parks the record at the head of its unit and hands it to a lane again after the
// backoff; what must stay behind it waits.
func (c *consumer) retryInPlace(it *item, ev *SettledEvent) {
	wait := max(c.cfg.backoff(ev.Attempt, ev.Err), 0)
	ev.Outcome = OutcomeRetry
	c.log.Debug("tidemark: retrying in place", c.recAttrs(it, ev.Attempt, "err", ev.Err, "backoff", wait)...)
	it.inPlace++
	c.settled(ev)
	it.act, it.wait = actPark, wait
}
