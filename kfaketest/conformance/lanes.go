package conformance

import (
	"context"
	"fmt"
	"sync"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

// laneScenarios are DESIGN §3.6: lanes, orderings, back-pressure.
func laneScenarios() []scenario {
	return []scenario{
		{name: "§3.6 ByPartition: a partition's records one at a time in order, partitions in parallel", run: byPartitionOrder},
		{name: "§3.6 ByKey: equal keys in order, different keys in parallel, keyless in partition order", run: byKeyOrder},
		{name: "§3.6 work is assigned dynamically: k busy keys keep min(k, n) lanes working", run: dynamicLanes},
		{name: "§3.6 a partition at MaxInFlightPerPartition is paused and resumed once drained", run: backpressurePauses},
		{name: "§3.6 MaxInFlight pauses every partition of the subscription", run: maxInFlightPausesAll},
	}
}

// concurrency tracks handler calls running at once, per unit of order and in all.
type concurrency struct {
	mu      sync.Mutex
	running map[string]int
	maxUnit int // the most calls of one unit running at once
	now     int
	maxAll  int
}

func (c *concurrency) enter(unit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.running == nil {
		c.running = map[string]int{}
	}
	c.running[unit]++
	c.maxUnit = max(c.maxUnit, c.running[unit])
	c.now++
	c.maxAll = max(c.maxAll, c.now)
}

func (c *concurrency) leave(unit string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.running[unit]--
	c.now--
}

func (c *concurrency) current() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *concurrency) maxima() (unit, all int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.maxUnit, c.maxAll
}

// barrier opens once n parties have arrived; a party that waits longer than the scenario allows
// gives up (and the scenario then fails on what it saw).
type barrier struct {
	mu   sync.Mutex
	n    int
	open *gate
}

func newBarrier(n int) *barrier { return &barrier{n: n, open: newGate()} }

func (b *barrier) arrive(ctx context.Context) bool {
	b.mu.Lock()
	b.n--
	if b.n == 0 {
		b.open.open()
	}
	b.mu.Unlock()
	return b.open.wait(ctx)
}

// Three partitions of four records, three lanes: each partition's records are handled one at a
// time, in offset order, and the three partitions run at once (their first records wait for each
// other).
func byPartitionOrder(e *env) {
	in, g := e.topic("in", 3), e.name("g")
	for p := range int32(3) {
		e.values(in, p, seq(fmt.Sprintf("p%d-", p), 4)...)
	}
	firsts := newBarrier(3)
	var conc concurrency
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			unit := fmt.Sprint(d.Record().Partition)
			conc.enter(unit)
			defer conc.leave(unit)
			got.add(d)
			if d.Record().Offset == 0 && !firsts.arrive(ctx) {
				return ctx.Err()
			}
			return nil
		}), runtime.Workers(3))
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 4, 1: 4, 2: 4})
	e.stop(app)
	for p := range int32(3) {
		require.Equal(e, []int64{0, 1, 2, 3}, got.offsetsOf(in, p), "partition %d in order, once each", p)
	}
	unit, all := conc.maxima()
	require.Equal(e, 1, unit, "a partition's records never overlap")
	require.Equal(e, 3, all, "the three partitions ran at once")
}

// One partition, keys a, b, c interleaved (three records each) and keyless records, three lanes:
// equal keys never overlap and keep offset order, the three keys run at once, keyless records keep
// partition order.
func byKeyOrder(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	var recs []*kgo.Record
	for i := range 3 {
		for _, k := range []string{"a", "b", "c"} {
			recs = append(recs, &kgo.Record{Topic: in, Key: []byte(k), Value: fmt.Appendf(nil, "%s%d", k, i)})
		}
		recs = append(recs, &kgo.Record{Topic: in, Value: fmt.Appendf(nil, "none%d", i)})
	}
	e.c.ProduceTo(e, 0, recs...)
	firsts := newBarrier(3)
	var conc concurrency
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			unit := string(d.Record().Key)
			conc.enter(unit)
			defer conc.leave(unit)
			got.add(d)
			if v := string(d.Record().Value); v == "a0" || v == "b0" || v == "c0" {
				if !firsts.arrive(ctx) {
					return ctx.Err()
				}
			}
			return nil
		}), runtime.Workers(3), runtime.ByKey)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: int64(len(recs))})
	e.stop(app)
	byKey := map[string][]string{}
	for _, x := range got.all() {
		byKey[string(x.rec.Key)] = append(byKey[string(x.rec.Key)], string(x.rec.Value))
	}
	require.Equal(e, map[string][]string{
		"a": {"a0", "a1", "a2"}, "b": {"b0", "b1", "b2"}, "c": {"c0", "c1", "c2"}, "": {"none0", "none1", "none2"},
	}, byKey, "each key (and the keyless records) in offset order, once each")
	unit, all := conc.maxima()
	require.Equal(e, 1, unit, "records of one key never overlap")
	require.Equal(e, 3, all, "the three keys ran at once, never more than Workers(3)")
}

// Four keys with one blocking record each and three lanes: three handlers run at once (no static
// hash leaves a lane idle while a key waits), never four; the fourth runs once one returns.
func dynamicLanes(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	var recs []*kgo.Record
	for _, k := range []string{"k1", "k2", "k3", "k4"} {
		recs = append(recs, &kgo.Record{Topic: in, Key: []byte(k), Value: []byte(k)})
	}
	e.c.ProduceTo(e, 0, recs...)
	release := newGate()
	var conc concurrency
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			conc.enter(string(d.Record().Key))
			defer conc.leave(string(d.Record().Key))
			if !release.wait(ctx) {
				return ctx.Err()
			}
			return nil
		}), runtime.Workers(3), runtime.ByKey)
	e.start(app)
	e.eventually(func() bool { return conc.current() == 3 }, "three lanes never worked at once")
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 4})
	_, all := conc.maxima()
	require.Equal(e, 3, all, "at most Workers(3) handlers at once")
}

// 200 records, MaxInFlightPerPartition(8), MaxPollRecords(50), a handler that waits: the partition
// is paused, it never holds more than the bound (DESIGN §3.6 allows one poll more; under Tracked
// the records beyond it wait in the partition's backlog), and once released everything is handled
// once, in order, and the partition ends resumed.
func backpressurePauses(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	vals := make([]string, 200)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	e.values(in, 0, vals...)
	release := newGate()
	var got calls
	obs := &observer{}
	app := e.app(runtime.Observe(obs), runtime.MaxPollRecords(50))
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if !release.wait(ctx) {
				return ctx.Err()
			}
			got.add(d)
			return nil
		}), runtime.MaxInFlightPerPartition(8))
	e.start(app)
	e.eventually(func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.paused) > 0 && obs.paused[0].Paused
	}, "the partition was never paused")
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 200})
	e.stop(app)
	require.Equal(e, vals, got.values(), "all handled once, in order")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, ev := range obs.delivered {
		require.LessOrEqual(e, ev.InFlight, 8, "held more than the bound")
	}
	require.False(e, obs.paused[len(obs.paused)-1].Paused, "the partition ends resumed")
}

// MaxInFlight(10) over two partitions of 30 records, MaxPollRecords(5): both partitions are
// paused, the subscription never holds more than the bound (DESIGN §3.6 allows one poll more), and
// all 60 are handled.
func maxInFlightPausesAll(e *env) {
	in, g := e.topic("in", 2), e.name("g")
	for p := range int32(2) {
		e.values(in, p, seq(fmt.Sprintf("p%d-", p), 30)...)
	}
	release := newGate()
	var got calls
	obs := &observer{}
	app := e.app(runtime.Observe(obs), runtime.MaxPollRecords(5))
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if !release.wait(ctx) {
				return ctx.Err()
			}
			got.add(d)
			return nil
		}), runtime.MaxInFlight(10))
	e.start(app)
	e.eventually(func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		paused := map[int32]bool{}
		for _, ev := range obs.paused {
			paused[ev.Partition] = ev.Paused
		}
		return paused[0] && paused[1]
	}, "both partitions should be paused")
	obs.mu.Lock()
	latest := map[int32]int{}
	for _, ev := range obs.delivered { // nothing settles while the handler waits
		latest[ev.Partition] = ev.InFlight
		require.LessOrEqual(e, latest[0]+latest[1], 10, "held more than MaxInFlight")
	}
	obs.mu.Unlock()
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 30, 1: 30})
	require.Equal(e, 60, got.len())
}
