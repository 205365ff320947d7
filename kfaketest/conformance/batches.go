package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-io/tidemark/runtime"
)

// batchScenarios are DESIGN §3.5: batches cut from what is queued, per-element results.
func batchScenarios() []scenario {
	return []scenario{
		{name: "§3.5 a batch is the head and what is queued behind it, at most n", run: batchesCutFromQueue},
		{name: "§3.5 element i's result settles element i", run: batchPerElement},
		{name: "§3.5 a short result retries the uncovered elements; a long one is ignored past n", run: batchShortAndLong},
		{name: "§3.5 under Unordered a batch spans partitions and settles each", run: batchSpansPartitions},
	}
}

// batchLog records each batch call's values, safely from many lanes.
type batchLog struct {
	mu sync.Mutex
	bs [][]string
}

func (b *batchLog) add(ds []*runtime.Delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var vs []string
	for _, d := range ds {
		vs = append(vs, string(d.Record().Value))
	}
	b.bs = append(b.bs, vs)
}

func (b *batchLog) all() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.bs)
}

func (b *batchLog) flat() []string {
	var out []string
	for _, vs := range b.all() {
		out = append(out, vs...)
	}
	return out
}

func seq(prefix string, n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return vs
}

// Five records queued at once, n = 2: batches of 2, 2 and 1, in order, each record once; then
// twelve more with n = 5 and three lanes: in order, none larger than 5.
func batchesCutFromQueue(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, seq("r", 5)...)
	var got batchLog
	app := e.app()
	runtime.HandleBatch(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked), 2,
		runtime.BatchAll(func(_ context.Context, ds []*runtime.Delivery) error { got.add(ds); return nil }))
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 5})
	e.stop(app)
	require.Equal(e, [][]string{{"r00", "r01"}, {"r02", "r03"}, {"r04"}}, got.all())

	in2, g2 := e.topic("in2", 1), e.name("g2")
	e.values(in2, 0, seq("s", 12)...)
	var got2 batchLog
	app2 := e.app()
	runtime.HandleBatch(app2, runtime.Topic(in2).Group(g2).Commit(runtime.Tracked), 5,
		runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
			got2.add(ds)
			return make([]error, len(ds))
		}), runtime.Workers(3))
	e.start(app2)
	e.c.WaitCommitted(e, g2, in2, map[int32]int64{0: 12})
	require.Equal(e, seq("s", 12), got2.flat())
	for _, b := range got2.all() {
		require.NotEmpty(e, b)
		require.LessOrEqual(e, len(b), 5)
	}
}

// ack, drop, retry once, ack: the retried element is handled again (alone: what is queued behind
// it) and the position waits for it.
func batchPerElement(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, seq("r", 4)...)
	var got batchLog
	first := true
	app := e.app()
	runtime.HandleBatch(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked), 4,
		runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
			got.add(ds)
			if first {
				first = false
				return []error{nil, runtime.Drop(errors.New("no")), runtime.Retry(errors.New("again")), nil}
			}
			return make([]error, len(ds))
		}), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 4})
	e.stop(app)
	require.Equal(e, [][]string{{"r00", "r01", "r02", "r03"}, {"r02"}}, got.all())
}

// A result shorter than the batch retries the elements it does not cover; entries past the batch
// are ignored.
func batchShortAndLong(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, seq("r", 4)...)
	var got batchLog
	calls := 0
	obs := &observer{}
	app := e.app(runtime.Observe(obs))
	runtime.HandleBatch(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked), 4,
		runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
			got.add(ds)
			calls++
			if calls == 1 {
				return []error{nil, nil} // short: r02 and r03 retry
			}
			return make([]error, len(ds)+3) // long: the extra entries are ignored
		}), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 4})
	e.stop(app)
	require.Equal(e, [][]string{{"r00", "r01", "r02", "r03"}, {"r02", "r03"}}, got.all())
	require.Len(e, obs.outcomes(runtime.OutcomeRetry), 2)
	require.Len(e, obs.outcomes(runtime.OutcomeAck), 4, "each record acked once")
}

// Under Unordered one batch may draw from several partitions; each partition it drew from is
// settled. The first batch is held until all nine records have arrived (a cluster whose partitions
// have different leaders delivers them in separate fetches), so the next one spans partitions.
func batchSpansPartitions(e *env) {
	in, g := e.topic("in", 3), e.name("g")
	for p := range int32(3) {
		e.values(in, p, seq(fmt.Sprintf("p%d-", p), 3)...)
	}
	arrived := newGate()
	obs := &deliveredObserver{want: 9, all: arrived}
	var got batchLog
	first := true
	app := e.app(runtime.Observe(obs))
	runtime.HandleBatch(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked), 9,
		runtime.BatchAll(func(ctx context.Context, ds []*runtime.Delivery) error {
			got.add(ds)
			if first { // one lane: no race
				first = false
				if !arrived.wait(ctx) {
					return ctx.Err()
				}
			}
			return nil
		}), runtime.Unordered)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3, 1: 3, 2: 3})
	e.stop(app)
	all := got.flat()
	slices.Sort(all)
	var want []string
	for p := range 3 {
		want = append(want, seq(fmt.Sprintf("p%d-", p), 3)...)
	}
	require.Equal(e, want, all, "each record once")
	spanned := false
	for _, b := range got.all() {
		parts := map[byte]bool{}
		for _, v := range b {
			parts[v[1]] = true
		}
		spanned = spanned || len(parts) > 1
	}
	require.True(e, spanned, "some batch drew from more than one partition: %v", got.all())
}

// deliveredObserver opens all once the runtime has received want records.
type deliveredObserver struct {
	runtime.NopObserver
	mu   sync.Mutex
	n    int
	want int
	all  *gate
}

func (o *deliveredObserver) Delivered(ev runtime.DeliveredEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.n += ev.Records; o.n >= o.want {
		o.all.open()
	}
}
