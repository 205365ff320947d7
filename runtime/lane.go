package runtime

import (
	"context"
	"fmt"
	"runtime/debug"
	"time"

	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/tracker"
	"github.com/twmb/franz-go/pkg/kgo"
)

// lane is one worker goroutine: it takes ready records from the dispatcher, runs the handler and
// settles the outcome, until the dispatcher stops.
func (c *consumer) lane() {
	n := max(c.batchN, 1)
	for {
		items, ok := c.d.take(n)
		if !ok {
			return
		}
		if c.bh != nil {
			c.handleBatch(items)
			continue
		}
		c.handle(items[0])
	}
}

// handle runs one record through the handler and settles it (DESIGN §3.2, §3.8).
func (c *consumer) handle(it *item) {
	ps := it.ps
	if !c.tracked && !c.txnMode {
		c.markTaken(it) // Auto: "stored when handed over"
	}
	ev := SettledEvent{Group: c.group, Topic: ps.topic, Partition: ps.partition, Offset: it.rec.Offset, Generation: ps.gen}
	if it.control || it.foreign {
		ev.Outcome = OutcomeControl
		if it.foreign {
			ev.Outcome = OutcomeForeignCopy
		}
		c.settle(it, ev)
		return
	}
	ev.Attempt = retry.Count(it.rec) + it.inPlace + c.txnTries(it) + 1
	if c.txnSpent(it) { // spent in an aborted window: settled without the handler (DESIGN §3.4)
		c.resolve(it, ev, kindRetry, errSpentInWindow, 0)
		return
	}
	d := &Delivery{rec: it.rec, group: c.group, generation: ps.gen, attempt: ev.Attempt}
	var start time.Time
	if c.timed {
		start = time.Now()
	}
	perr, err := c.invoke(c.ctxOf(it), it, d)
	if c.timed {
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
			c.obs.Settled(ev)
			c.d.finish(it, actHold, 0) // never committed; the App shuts down
			c.app.fail(perr)
			return
		}
	}
	kind, after, cause := classify(err)
	if kind == kindRetry && it.win != nil && c.retryAbortsWindow(it, ev, d, cause, after) {
		return
	}
	c.resolve(it, ev, kind, cause, after)
}

// settle completes a record that is done: its offset may now be committed.
func (c *consumer) settle(it *item, ev SettledEvent) {
	if it.ps.trk != nil && it.ps.trk.Complete(it.slot) == tracker.Completed {
		c.kick()
	}
	c.obs.Settled(ev)
	c.d.finish(it, actDone, 0)
}

// invoke calls the handler, recovering a panic into a *PanicError.
func (c *consumer) invoke(ctx context.Context, it *item, d *Delivery) (perr *PanicError, err error) {
	defer func() {
		if v := recover(); v != nil {
			perr = &PanicError{Value: v, Stack: debugStack(), Topic: it.rec.Topic, Partition: it.rec.Partition, Offset: it.rec.Offset}
		}
	}()
	if topic := c.cfg.replyTopic; topic != "" {
		d.reply = func(ctx context.Context, v []byte) error {
			return c.app.Publish(ctx, &kgo.Record{Topic: topic, Key: it.rec.Key, Value: v})
		}
	}
	if it.win != nil { // publishes made with this ctx are counted on d (Transactional retries)
		ctx = context.WithValue(ctx, deliveryKey{}, d)
	}
	return nil, c.h.HandleDelivery(ctx, d)
}

// markTaken marks an Auto record for franz-go's autocommit, unless its partition is no longer
// owned (a late mark must never reach a partition another member owns; DESIGN §3.7).
func (c *consumer) markTaken(it *item) {
	if c.manual {
		return // manual partitions commit partState.taken with kadm
	}
	c.markMu.Lock()
	defer c.markMu.Unlock()
	if !it.ps.closed.Load() {
		c.cl.MarkCommitRecords(it.rec)
	}
}

func (c *consumer) recAttrs(it *item, attempt int, kv ...any) []any {
	return append([]any{"topic", it.rec.Topic, "partition", it.rec.Partition, "offset", it.rec.Offset,
		"group", c.group, "generation", it.ps.gen, "attempt", attempt}, kv...)
}

// debugStack is the stack of the calling goroutine, for a *PanicError.
func debugStack() []byte { return debug.Stack() }
