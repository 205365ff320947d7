package runtime

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/tidemark-io/tidemark/batch"
)

// A BatchHandler processes a batch of records from one subscription and returns one error per
// element, in order: element i's error settles element i as a Handler's would (nil acks, Drop,
// Retry, RetryAfter). A short result retries the uncovered elements, so a nil result retries them
// all (make([]error, len(ds)) acks them all); entries past the batch are ignored; both are logged
// (DESIGN §3.5). Up to Workers(k) batches run at once. ctx is a Handler's (see Handler), except for
// a batch that spans partitions (Unordered): its ctx ends as soon as any of its partitions' does,
// and once the batch has returned and been settled ("tidemark: the batch spanning partitions has
// returned"), so work the handler leaves running with it ends then (docs/batches.md).
type BatchHandler interface {
	HandleBatch(ctx context.Context, ds []*Delivery) []error
}

// BatchHandlerFunc adapts a plain function to a BatchHandler.
type BatchHandlerFunc func(ctx context.Context, ds []*Delivery) []error

// HandleBatch calls f(ctx, ds).
func (f BatchHandlerFunc) HandleBatch(ctx context.Context, ds []*Delivery) []error { return f(ctx, ds) }

// HandleBatch registers h for batches of at most n records of sub (1 to 1,048,576). A lane takes
// one ready record plus the records already ready behind it in the same unit of order — the
// partition under ByPartition, the key under ByKey, any partition under Unordered — never more
// than n, never empty, and never waits for more (DESIGN §3.5). Like Handle it only records; Start
// validates (a nil option: a *ConfigError naming HandleBatch and its position, from 1). Like
// Handle it must be called before Start; it panics after.
func HandleBatch(app *App, sub Subscription, n int, h BatchHandler, opts ...HandleOption) {
	cfg := defaultHandleConfig()
	for i, o := range opts {
		if o == nil { // reported by Start
			cfg.nilOpts = append(cfg.nilOpts, i+1)
			continue
		}
		o.applyHandle(&cfg)
	}
	app.register(registration{sub: sub, batch: h, batchN: n, isBatch: true, cfg: cfg})
}

// BatchAll adapts a function that returns one error for the whole batch: nil acks every element,
// any other outcome applies to every element. A nil fn gives a nil BatchHandler, which Start
// reports.
func BatchAll(fn func(ctx context.Context, ds []*Delivery) error) BatchHandler {
	if fn == nil {
		return nil
	}
	return BatchHandlerFunc(func(ctx context.Context, ds []*Delivery) []error {
		err := fn(ctx, ds)
		out := make([]error, len(ds))
		for i := range out {
			out[i] = err
		}
		return out
	})
}

// JSONBatch adapts a function of decoded values: each record's value is decoded into a T with
// encoding/json; elements that do not decode are dropped (ErrDecode) and not passed to fn, which
// returns one error per value it received, in order. A result of fn of the wrong length is
// handled and logged as a BatchHandler's (DESIGN §3.5). A nil fn gives a nil BatchHandler, which
// Start reports.
func JSONBatch[T any](fn func(ctx context.Context, vs []T) []error) BatchHandler {
	if fn == nil {
		return nil
	}
	return jsonBatch[T](fn)
}

// jsonBatch is JSONBatch's BatchHandler. It aligns fn's result itself, since fn sees only the
// values that decoded, and tells the runtime how far off it was (an aligningBatchHandler).
type jsonBatch[T any] func(ctx context.Context, vs []T) []error

func (fn jsonBatch[T]) HandleBatch(ctx context.Context, ds []*Delivery) []error {
	out, _, _ := fn.handleBatchAligned(ctx, ds)
	return out
}

func (fn jsonBatch[T]) handleBatchAligned(ctx context.Context, ds []*Delivery) (out []error, short, extra int) {
	out = make([]error, len(ds))
	vs := make([]T, 0, len(ds))
	idx := make([]int, 0, len(ds))
	for i, d := range ds {
		var v T
		if err := json.Unmarshal(d.Record().Value, &v); err != nil {
			out[i] = Drop(fmt.Errorf("%w: %w", ErrDecode, err))
			continue
		}
		vs = append(vs, v)
		idx = append(idx, i)
	}
	if len(vs) == 0 {
		return out, 0, 0
	}
	res, short, extra := batch.Align(fn(ctx, vs), len(vs), Retry(errShortBatch))
	for j, i := range idx {
		out[i] = res[j]
	}
	return out, short, extra
}

// An aligningBatchHandler is a BatchHandler adapter that aligns its function's result with the
// batch itself and returns how many elements it retried for want of a result (short) and how
// many entries past the end it ignored (extra), for handleBatch's log line.
type aligningBatchHandler interface {
	handleBatchAligned(ctx context.Context, ds []*Delivery) (results []error, short, extra int)
}

var errShortBatch = fmt.Errorf("tidemark: the batch handler returned no result for this element")

// handleBatch runs one batch through the batch handler and settles every element (DESIGN §3.5).
// running is set to the elements in the handler, or being settled after it (see lane).
func (c *consumer) handleBatch(items []*item, running *[]*item) {
	work, attempts := items[:0:0], make([]int, 0, len(items))
	for _, it := range items {
		if it.stale() { // dropped, uncommitted: its new copy runs (DESIGN.md departures, §3.1)
			it.act = actDone
			continue
		}
		attempt, spent := c.attempt(it)
		if it.control || it.foreign || spent != nil {
			c.handle(it, nil) // settled without the handler
			continue
		}
		work, attempts = append(work, it), append(attempts, attempt)
	}
	if len(work) == 0 {
		return
	}
	ds := make([]*Delivery, len(work))
	evs := make([]SettledEvent, len(work))
	for i, it := range work {
		attempt := attempts[i]
		ds[i] = &Delivery{rec: it.rec, group: c.group, generation: it.ps.gen, attempt: attempt}
		evs[i] = c.event(it, attempt)
	}
	ctx, cancel := c.batchContext(work)
	defer cancel()
	var pubs publishes // a batch's publishes are the attempt of each of its elements
	if work[0].win != nil {
		ctx = withPublishes(ctx, &pubs)
	}
	start := time.Now()
	*running = work
	results, short, extra, perr := c.invokeBatch(ctx, ds, work[0])
	dur := time.Since(start)
	if perr != nil {
		c.log.Error("tidemark: batch handler panicked", c.recAttrs(work[0], attempts[0],
			"batch", len(work), "panic", fmt.Sprint(perr.Value), "stack", string(perr.Stack))...)
		var err error
		switch c.cfg.panicPolicy {
		case PanicRetry:
			err = Retry(perr)
		case PanicDrop:
			err = Drop(perr)
		default:
			for i, it := range work {
				c.abortWindow(it.win, perr)
				evs[i].Outcome, evs[i].Err, evs[i].Duration = OutcomePanic, perr, dur
				c.settled(&evs[i])
				it.act = actHold
			}
			c.app.fail(perr)
			return
		}
		results = make([]error, len(work))
		for i := range results {
			results[i] = err
		}
	}
	aligned, s, e := batch.Align(results, len(work), Retry(errShortBatch))
	if short, extra = short+s, extra+e; short > 0 || extra > 0 {
		c.log.Warn("tidemark: batch handler returned a result of the wrong length",
			c.recAttrs(work[0], attempts[0], "batch", len(work), "retried", short, "ignored", extra)...)
	}
	pubs.returned(work[0].win) // before its elements settle: one's abort is not another's cause
	for i, it := range work {
		evs[i].Duration = dur
		c.conclude(it, &evs[i], aligned[i], ctx, &pubs)
	}
}

// invokeBatch calls the batch handler, recovering a panic into a *PanicError naming the first
// element, first (a runtime.Goexit: see lane). short and extra are what an aligningBatchHandler
// reports; 0 for others.
func (c *consumer) invokeBatch(ctx context.Context, ds []*Delivery, first *item) (results []error, short, extra int, perr *PanicError) {
	defer func() {
		if v := recover(); v != nil {
			perr = c.panicError(first, v, debugStack())
		}
	}()
	if a, ok := c.bh.(aligningBatchHandler); ok {
		results, short, extra = a.handleBatchAligned(ctx, ds)
		return results, short, extra, nil
	}
	return c.bh.HandleBatch(ctx, ds), 0, 0, nil
}

// errBatchReturned ends the ctx of a batch that spans partitions once it has been settled.
var errBatchReturned = errors.New("tidemark: the batch spanning partitions has returned")

// batchContext is the ctx of a batch: its partition's handler ctx, or, for a batch spanning
// partitions, a ctx of its own, cancelled as soon as any of theirs is (the batch can then no longer
// be committed whole), and once the batch has been settled (errBatchReturned: it holds an AfterFunc
// on each partition's ctx, which must not pile up while the partitions stay owned).
func (c *consumer) batchContext(items []*item) (context.Context, context.CancelFunc) {
	if items[0].win != nil {
		return items[0].win.ctx, func() {} // a window's records share its ctx
	}
	first := items[0].ps
	same := true
	for _, it := range items[1:] {
		same = same && it.ps == first
	}
	if same {
		return first.ctx, func() {}
	}
	ctx, cancel := context.WithCancelCause(context.WithoutCancel(first.ctx))
	var stops []func() bool
	seen := map[*partState]bool{}
	for _, it := range items {
		if seen[it.ps] {
			continue
		}
		seen[it.ps] = true
		pctx := it.ps.ctx
		stops = append(stops, context.AfterFunc(pctx, func() { cancel(context.Cause(pctx)) }))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel(errBatchReturned)
	}
}
