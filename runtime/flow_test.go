package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// partValues returns n values "p-0" … "p-(n-1)" for partition p.
func partValues(p int32, n int) []string {
	v := make([]string, n)
	for i := range v {
		v[i] = fmt.Sprint(p, "-", i)
	}
	return v
}

// produceParts produces n values (partValues) to each of topic's first parts partitions.
func produceParts(t *testing.T, c *kfaketest.Cluster, topic string, parts int32, n int) {
	t.Helper()
	for p := range parts {
		c.ProduceValues(t, topic, p, partValues(p, n)...)
	}
}

// MaxInFlight bounds what a whole subscription holds: at the bound every partition is paused, and
// what is polled beyond it waits in the partitions' backlogs (DESIGN §3.6).
func TestMaxInFlightPausesEveryPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	produceParts(t, c, "in", 2, 30)
	release := make(chan struct{})
	var s seen
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(5))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if err := await(ctx, release); err != nil {
				return err
			}
			s.add(string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.MaxInFlight(10))
	start(t, app)
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		paused := map[int32]bool{}
		for _, e := range obs.paused {
			paused[e.Partition] = e.Paused
		}
		return paused[0] && paused[1]
	}, "both partitions should be paused")
	obs.mu.Lock()
	latest := map[int32]int{}
	for _, e := range obs.delivered { // nothing settles while the handler blocks
		latest[e.Partition] = e.InFlight
		require.LessOrEqual(t, latest[0]+latest[1], 10, "held more than MaxInFlight")
	}
	obs.mu.Unlock()
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 30, 1: 30})
	require.Equal(t, 60, s.len())
}

// Under MaxInFlight, a partition whose head is stuck (a blocked handler, a long retry backoff)
// keeps its records held, here 20 of the subscription's 30: more than half, so the subscription
// never drains to half. The other partitions must still get records while there is room: the
// subscription's pause lifts 100 ms after it began (DESIGN §3.6, ByPartition runs partitions in
// parallel).
func TestMaxInFlightDoesNotLetAStuckPartitionStopTheOthers(t *testing.T) {
	const n = 60
	c := kfaketest.New(t, kfaketest.Topic("in", 3))
	produceParts(t, c, "in", 3, n)
	release := make(chan struct{})
	startStuckAt(t, c, 5, release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5, 1: n, 2: n})
	require.Equal(t, int64(5), c.Committed(t, "g", "in")[0], "nothing passes the stuck record")
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: n, 1: n, 2: n})
}

// startStuckAt starts a Tracked App on "in" (3 lanes, MaxInFlightPerPartition(20), MaxInFlight(30))
// whose handler holds record (0, off) until release is closed (or its ctx ends).
func startStuckAt(t *testing.T, c *kfaketest.Cluster, off int64, release chan struct{}) {
	t.Helper()
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if r := d.Record(); r.Partition == 0 && r.Offset == off {
				return await(ctx, release)
			}
			return nil
		}), runtime.Workers(3), runtime.MaxInFlightPerPartition(20), runtime.MaxInFlight(30))
	start(t, app)
}

// The same stuck partition, but the others have nothing waiting when the subscription pauses: the
// stuck partition's backlog holds the poll loop off, partition 1 drains to nothing and no partition
// starves with a backlog. Records produced afterwards must still be polled and handled: the pause
// is lifted holdMax (100 ms) after it began, as there is room under MaxInFlight.
func TestMaxInFlightLetsRecordsProducedLaterPastAStuckPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 3))
	c.ProduceValues(t, "in", 0, partValues(0, 100)...)
	c.ProduceValues(t, "in", 1, partValues(1, 10)...)
	release := make(chan struct{})
	startStuckAt(t, c, 0, release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 0, 1: 10})
	c.ProduceValues(t, "in", 2, partValues(2, 5)...)
	c.ProduceValues(t, "in", 1, partValues(1, 5)...)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 0, 1: 15, 2: 5}) // nothing passes the stuck record
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 100, 1: 15, 2: 5})
}

// A MaxInFlight pause lifted by its timer admits records from a backlog, and a lane must run them
// at once. Here every lane is idle when the timer fires: partition 0's 20 records and partition
// 1's offset 0 wait for a 30 s backoff (21 held, above half of 30, so only the timer lifts the
// pause), and partition 1's later records wait in its backlog. They are handled up to partition
// 1's own bound (its tracker's span from offset 0: offsets 1-19) long before the backoff ends.
func TestMaxInFlightPauseLiftedByItsTimerWakesALane(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	produceParts(t, c, "in", 2, 100)
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if r := d.Record(); d.Attempt() == 1 && (r.Partition == 0 || r.Offset == 0) {
				return errors.New("later") // retried in place after 30 s
			}
			if d.Record().Partition == 1 {
				s.add(string(d.Record().Value), d.Attempt())
			}
			return nil
		}), runtime.Unordered, runtime.Workers(2), runtime.MaxInFlightPerPartition(20), runtime.MaxInFlight(30),
		runtime.Backoff(func(int, error) time.Duration { return 30 * time.Second }))
	start(t, app)
	eventually(t, func() bool { return s.len() == 19 }, "partition 1's offsets 1-19 were not handled: %d", s.len())
}

// At its MaxInFlight bound under steady load, a subscription pauses and resumes its partitions at
// the bound and at half of it (or after the 100 ms timer): a few pauses per MaxInFlight/2 records,
// not one per record. 16 partitions × 300 records, Unordered, MaxInFlight(64), a 200 µs handler:
// fewer pauses than a quarter of the records (pausing at each record of room made more pauses
// than records).
func TestMaxInFlightAtItsBoundDoesNotPausePerRecord(t *testing.T) {
	const parts, per, maxAll = 16, 300, 64
	c := kfaketest.New(t, kfaketest.Topic("in", parts))
	produceParts(t, c, "in", parts, per)
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
			for end := time.Now().Add(200 * time.Microsecond); time.Now().Before(end); { // busy, not asleep
			}
			return nil
		}), runtime.Workers(8), runtime.Unordered, runtime.MaxInFlight(maxAll))
	start(t, app)
	want := map[int32]int64{}
	for p := range int32(parts) {
		want[p] = per
	}
	require.NoError(t, waitCommittedWithin(c, time.Minute, "g", "in", want)) // 4,800 × 200 µs on 8 lanes
	obs.mu.Lock()
	defer obs.mu.Unlock()
	pauses := 0
	for _, e := range obs.paused {
		if e.Paused {
			pauses++
		}
	}
	require.Less(t, pauses, parts*per/4, "partition pauses for %d records", parts*per)
}

// Shutdown drains running handlers within its ctx; only past that bound is a handler's ctx
// cancelled, and the unfinished record is not committed, in every mode: a handler that returns
// its cancelled ctx's error, or a Drop of it, did not finish, so it is neither a refused retry
// that Auto commits past, a drop, nor a dead letter; it stays in flight (OutcomeRetry) for the
// next owner (DESIGN §3.7).
func TestShutdownCancelsHandlersOnlyPastItsBound(t *testing.T) {
	cases := []struct {
		name  string
		mode  runtime.CommitMode
		opts  []runtime.HandleOption
		batch bool // a BatchHandler of batches of one
		drop  bool // the handler returns runtime.Drop(ctx.Err())
	}{
		{"Auto", runtime.Auto, nil, false, false},
		{"Tracked", runtime.Tracked, nil, false, false},
		{"Tracked with a dead-letter topic", runtime.Tracked, []runtime.HandleOption{runtime.DeadLetter("dlq")}, false, false},
		{"Auto batches", runtime.Auto, nil, true, false},
		{"Tracked batches with a dead-letter topic", runtime.Tracked, []runtime.HandleOption{runtime.DeadLetter("dlq")}, true, false},
		{"Auto dropping", runtime.Auto, nil, false, true},
		{"Tracked dropping", runtime.Tracked, nil, false, true},
		{"Auto batches dropping", runtime.Auto, nil, true, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
			c.ProduceValues(t, "in", 0, "fast", "stuck", "behind")
			running := make(chan struct{})
			cause := make(chan error, 1)
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			h := func(ctx context.Context, d *runtime.Delivery) error {
				if string(d.Record().Value) != "stuck" {
					return nil
				}
				close(running)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				if tc.drop {
					return runtime.Drop(ctx.Err())
				}
				return ctx.Err()
			}
			sub := runtime.Topic("in").Group("g").Commit(tc.mode)
			if tc.batch {
				runtime.HandleBatch(app, sub, 1, runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
					return []error{h(ctx, ds[0])}
				}), tc.opts...)
			} else {
				runtime.Handle(app, sub, runtime.HandlerFunc(h), tc.opts...)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			<-running
			sctx, scancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
			defer scancel()
			err := app.Shutdown(sctx)
			require.ErrorIs(t, err, context.DeadlineExceeded, "the drain bound passed")
			require.ErrorContains(t, <-cause, "shutdown bound passed")
			var outcomes []runtime.Outcome
			obs.mu.Lock()
			for _, e := range obs.settled {
				if e.Offset == 1 {
					outcomes = append(outcomes, e.Outcome)
				}
			}
			obs.mu.Unlock()
			require.Equal(t, []runtime.Outcome{runtime.OutcomeRetry}, outcomes, "the stuck record did not finish")
			require.Empty(t, c.ReadAll(t, "dlq", false), "nothing dead-lettered")
			require.Equal(t, map[int32]int64{0: 1}, c.Committed(t, "g", "in"), "the stuck record stays uncommitted")
		})
	}
}

// A record stuck in flight while the records behind it complete still bounds its partition: the
// partition pauses once MaxInFlightPerPartition records pile up behind it, and the App never fails
// with a full tracker (DESIGN §3.3, §3.6).
func TestAStuckRecordPausesItsPartitionInsteadOfFillingTheTracker(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var recs []*kgo.Record
	for i := range 300 {
		recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "%d", i)})
	}
	c.ProduceTo(t, 0, recs...)
	release := make(chan struct{})
	var s seen
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(20))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 0 {
				if err := await(ctx, release); err != nil {
					return err
				}
			}
			s.add(string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.Workers(4), runtime.ByKey, runtime.MaxInFlightPerPartition(16))
	start(t, app)
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.paused) > 0 && obs.paused[len(obs.paused)-1].Paused
	}, "the partition was never paused")
	// Paused with offset 0 stuck: at most the bound plus one poll were delivered.
	n := s.len()
	require.Less(t, n, 16+20)
	state, _ := app.State()
	require.Equal(t, runtime.StateRunning, state)
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 300})
	require.Equal(t, 300, s.len())
}

// A stalled partition shows in the InFlight events: records held and how long the oldest has held
// the committable position (DESIGN §3.3's stalled-partition metric).
func TestInFlightEventsShowAStalledPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "stuck", "behind")
	release := make(chan struct{})
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "stuck" {
				if err := await(ctx, release); err != nil {
					return err
				}
			}
			return nil
		}))
	start(t, app)
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, e := range obs.inflight {
			if e.InFlight == 2 && e.OldestAge > 0 {
				return true
			}
		}
		return false
	}, "no InFlight event showed the stall")
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
}

// A partition paused in franz-go that resumes while another partition holds the poll loop off is
// polled again, though the other one stays full behind a stuck record (DESIGN §3.6): partition 1
// fills behind its blocked first record and is paused in franz-go (a lane is idle); partition 0
// then fills behind its own blocked record and holds the poll loop off with both lanes busy and
// every partition paused; partition 1's record is released, it drains and resumes, and all 20 of
// its records must be handled and committed while partition 0 is still stuck.
func TestAResumedPartitionIsPolledWhileAnotherHoldsThePollLoop(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	release0, release1 := newGate(), newGate()
	started0, started1 := make(chan struct{}), make(chan struct{})
	paused0 := make(chan struct{})
	var once0, once1, onceP sync.Once
	obs := &pauseObserver{observer: &observer{}, onPaused: func(e runtime.PausedEvent) {
		if e.Partition == 0 && e.Paused {
			onceP.Do(func() { close(paused0) })
		}
	}}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(4))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset != 0 {
				return nil
			}
			g, started, once := release0, started0, &once0
			if d.Record().Partition == 1 {
				g, started, once = release1, started1, &once1
			}
			once.Do(func() { close(started) })
			select {
			case <-g.ch:
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}), runtime.Workers(2), runtime.MaxInFlightPerPartition(4))
	c.ProduceValues(t, "in", 1, numbered(20)...)
	start(t, app)
	waitClosed(t, started1, "partition 1's first record never started")
	c.ProduceValues(t, "in", 0, numbered(20)...)
	waitClosed(t, started0, "partition 0's first record never started")
	waitClosed(t, paused0, "partition 0 was never paused")
	release1.open()
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 0, 1: 20})
	release0.open()
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20, 1: 20})
	stop(t, app)
}

// fetchedRecords counts the records the client's fetches decoded (a kgo hook called once per
// record batch): above the records produced means some were fetched twice.
type fetchedRecords struct{ n atomic.Int64 }

func (f *fetchedRecords) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	f.n.Add(int64(m.NumRecords))
}

// Under Auto and Tracked, a partition holds exactly MaxInFlightPerPartition records at most, not
// one poll more: the poll loop takes franz-go's whole buffered fetch, and what the partition has no
// room for waits in its backlog until it drains (DESIGN §3.6, docs/design.md departures). Nothing
// is fetched twice, every record is handled once, in order, and the committed offset is the end.
func TestABacklogKeepsAPartitionAtItsBound(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, numbered(200)...)
			release := newGate()
			var s seen
			obs := &observer{}
			fetched := &fetchedRecords{}
			app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(5),
				runtime.ClientOpts(kgo.WithHooks(fetched)))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if d.Record().Offset == 0 && !release.wait(ctx) {
						return ctx.Err()
					}
					s.add(string(d.Record().Value), d.Attempt())
					return nil
				}), runtime.MaxInFlightPerPartition(8))
			start(t, app)
			eventually(t, func() bool { return obs.totalDelivered() == 200 }, "the whole fetch was never polled")
			obs.mu.Lock()
			require.True(t, obs.paused[0].Paused, "the partition was paused first")
			obs.mu.Unlock()
			require.Equal(t, 0, s.len(), "the first record is still in its handler")
			release.open()
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 200})
			stop(t, app)
			require.Equal(t, numbered(200), s.values(), "each record once, in order")
			require.Equal(t, int64(200), fetched.n.Load(), "nothing fetched twice")
			obs.mu.Lock()
			defer obs.mu.Unlock()
			for _, e := range obs.delivered {
				require.LessOrEqual(t, e.InFlight, 8, "held more than MaxInFlightPerPartition")
			}
			require.False(t, obs.paused[len(obs.paused)-1].Paused, "the partition ends resumed")
		})
	}
}

// A partition whose backlog holds the poll loop off delays another partition's records by at most
// about 100 ms, not until the backlog drains (DESIGN §3.6; docs/consumer-internals.md,
// back-pressure): with one lane, partition 0's 400 records (5 ms each, bound 4) fill its backlog,
// partition 1's 10 records arrive afterwards, and all of them are handled and committed while
// most of partition 0's backlog still waits. Waiting for the backlog to drain would give at least
// 396; the bound of 350 leaves partition 1 about 1.7 s on a loaded machine.
func TestABacklogDelaysOtherPartitionsBoundedly(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	c.ProduceValues(t, "in", 0, numbered(400)...)
	var handled0, at1 atomic.Int64 // at1: partition 0's records handled when partition 1's last ran
	at1.Store(-1)
	paused0 := make(chan struct{})
	var once sync.Once
	obs := &pauseObserver{observer: &observer{}, onPaused: func(e runtime.PausedEvent) {
		if e.Partition == 0 && e.Paused {
			once.Do(func() { close(paused0) })
		}
	}}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Partition == 0 {
				time.Sleep(5 * time.Millisecond) // the handler's work, not synchronisation
				handled0.Add(1)
			} else if d.Record().Offset == 9 {
				at1.Store(handled0.Load())
			}
			return nil
		}), runtime.MaxInFlightPerPartition(4))
	start(t, app)
	waitClosed(t, paused0, "partition 0 was never paused")
	c.ProduceValues(t, "in", 1, numbered(10)...)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 400, 1: 10})
	require.GreaterOrEqual(t, at1.Load(), int64(0))
	require.Less(t, at1.Load(), int64(350), "partition 1 waited for partition 0's backlog")
}

// Parked retry copies are held records under MaxInFlight, on a retry topic too: three copies of
// partition 0's records, parked on in.retry for 3 s under MaxInFlight(3), leave the subscription no
// room. A record produced to partition 1 once they are parked is handled only after the first copy
// fell due, not at once (MaxInFlight's doc).
func TestMaxInFlightCountsParkedRetryCopies(t *testing.T) {
	const delay = 3 * time.Second // room for the copies to be parked on a loaded machine
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("in.retry", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	type call struct {
		key string // value/attempt
		at  time.Time
	}
	var mu sync.Mutex
	var calls []call
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			mu.Lock()
			calls = append(calls, call{fmt.Sprintf("%s/%d", d.Record().Value, d.Attempt()), time.Now()})
			mu.Unlock()
			if d.Record().Partition == 0 && d.Record().Topic == "in" {
				return runtime.RetryAfter(delay, errors.New("later"))
			}
			return nil
		}), runtime.RetryTo("in.retry"), runtime.MaxInFlight(3))
	start(t, app)
	eventually(t, func() bool { // reported by the committer's InFlight events (every commit tick)
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, e := range obs.inflight {
			if e.Topic == "in.retry" && e.InFlight == 3 {
				return true
			}
		}
		return false
	}, "the three copies should be parked")
	c.ProduceValues(t, "in", 1, "x")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3, 1: 1})
	c.WaitCommitted(t, "g", "in.retry", map[int32]int64{0: 3})
	stop(t, app)
	mu.Lock()
	defer mu.Unlock()
	handled := map[string]time.Time{}
	for _, cl := range calls {
		handled[cl.key] = cl.at
	}
	require.Len(t, calls, 7, "%v", calls) // a, b, c twice; x once: each once per attempt
	require.Len(t, handled, 7, "%v", calls)
	first := handled["a/2"]
	for _, k := range []string{"b/2", "c/2"} {
		if handled[k].Before(first) {
			first = handled[k]
		}
	}
	require.False(t, handled["x/1"].Before(first), "x was handled %v before the first copy fell due", first.Sub(handled["x/1"]))
	// x-tidemark-not-before is in whole ms: a copy may run up to 1 ms before failure + delay.
	require.GreaterOrEqual(t, first.Sub(handled["a/1"]), delay-time.Millisecond, "a copy ran before it was due")
}

// InFlight events count the records a partition still holds, not those a lane has settled in a
// take it has not finished (helper-134: a take is up to 64 records of one partition, and they
// counted until it ended: 20 reported while offsets 0 to 9 were settled and committed).
func TestInFlightEventsLeaveOutSettledRecordsOfARunningTake(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Tracked, runtime.Auto} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			vals := make([]string, 20)
			for i := range vals {
				vals[i] = fmt.Sprint(i)
			}
			c.ProduceValues(t, "in", 0, vals...)
			release, entered := make(chan struct{}), make(chan struct{})
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if d.Record().Offset == 10 {
						close(entered)
						return await(ctx, release)
					}
					return nil
				}))
			start(t, app)
			select {
			case <-entered:
			case <-time.After(kfaketest.WaitTimeout):
				t.Fatal("offset 10 never reached its handler")
			}
			obs.mu.Lock()
			k := len(obs.inflight) // the events from here on were built after offset 9 settled, bar one under way
			obs.mu.Unlock()
			eventually(t, func() bool {
				obs.mu.Lock()
				defer obs.mu.Unlock()
				return len(obs.inflight) > k+1
			}, "no InFlight event after offset 10 began")
			obs.mu.Lock()
			got := obs.inflight[k+1]
			obs.mu.Unlock()
			require.Equal(t, 10, got.InFlight, "offsets 10 to 19 are held, 0 to 9 settled")
			close(release)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20})
		})
	}
}
