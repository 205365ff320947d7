package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Tests of multi-record takes: a lane running a single-record Handler takes up to 64 queued
// records of one unit of order and handles them one by one (runtime/lane.go handleTake), then
// finishes them under one lock (dispatcher.finishTake).

// takeObserver is observer with a count of delivered records per partition, and channels closed
// once a partition has received at least n records.
type takeObserver struct {
	*observer
	dmu     sync.Mutex
	got     map[int32]int
	waiters []takeWaiter
}

type takeWaiter struct {
	p  int32
	n  int
	ch chan struct{}
}

func newTakeObserver() *takeObserver {
	return &takeObserver{observer: &observer{}, got: map[int32]int{}}
}

func (o *takeObserver) Delivered(e runtime.DeliveredEvent) {
	o.observer.Delivered(e)
	o.dmu.Lock()
	defer o.dmu.Unlock()
	o.got[e.Partition] += e.Records
	o.wakeLocked()
}

func (o *takeObserver) wakeLocked() {
	kept := o.waiters[:0]
	for _, w := range o.waiters {
		if o.got[w.p] >= w.n {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	o.waiters = kept
}

// delivered returns a channel closed once partition p has received at least n records.
func (o *takeObserver) delivered(p int32, n int) <-chan struct{} {
	o.dmu.Lock()
	defer o.dmu.Unlock()
	ch := make(chan struct{})
	o.waiters = append(o.waiters, takeWaiter{p, n, ch})
	o.wakeLocked()
	return ch
}

// offsetRange returns from..to-1.
func offsetRange(from, to int64) []int64 {
	var out []int64
	for o := from; o < to; o++ {
		out = append(out, o)
	}
	return out
}

// numberedIn starts a cluster with topic "in" of partitions partitions, each holding the records
// numbered(n).
func numberedIn(t *testing.T, partitions int32, n int) *kfaketest.Cluster {
	t.Helper()
	c := kfaketest.New(t, kfaketest.Topic("in", partitions))
	for p := range partitions {
		c.ProduceValues(t, "in", p, numbered(n)...)
	}
	return c
}

// handOver starts member B (logging its handler calls) in sub's group, waits until member A was
// revoked a partition and the group has committed total on both partitions of "in", and returns
// B's log with the moved and the kept partition.
func handOver(t *testing.T, c *kfaketest.Cluster, sub runtime.Subscription, watch *revokeWatch, total int64, hopts ...runtime.HandleOption) (bLog *handledLog, moved, kept int32) {
	t.Helper()
	_, bLog = startLogging(t, c, sub, nil, hopts...)
	waitClosed(t, watch.revoked, "A was never revoked a partition")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: total, 1: total})
	moved, kept = watch.movedOne(t, "in")
	return bLog, moved, kept
}

// numbered returns "0".."n-1".
func numbered(n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprint(i)
	}
	return vs
}

// A retry in place in the middle of a take (ByPartition, Tracked): the retried record runs again
// before every record behind it, the records behind it run exactly once each, in order, including
// records polled while the take was in progress; the last record of one take and the first of the
// next retry too; the committed offset reaches the end.
func TestTakeRetryInTheMiddleKeepsPartitionOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(100)...)
	// failures per offset: 5 fails once after more records arrive during its take, 40 once, 63 and
	// 64 (end of the first take, start of the second, when the first poll got everything) once,
	// 100 (polled during the take) twice.
	fails := map[int64]int{5: 1, 40: 1, 63: 1, 64: 1, 100: 2}
	obs := newTakeObserver()
	all := obs.delivered(0, 100)
	more := obs.delivered(0, 150)
	started5 := make(chan struct{})
	var (
		mu   sync.Mutex
		offs []int64
		atts []int
	)
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			off := d.Record().Offset
			mu.Lock()
			offs = append(offs, off)
			atts = append(atts, d.Attempt())
			mu.Unlock()
			wait := func(ch <-chan struct{}) error {
				select {
				case <-ch:
					return nil
				case <-ctx.Done():
					return ctx.Err()
				}
			}
			switch {
			case off == 0 && d.Attempt() == 1: // everything is queued before the first take ends
				if err := wait(all); err != nil {
					return err
				}
			case off == 5 && d.Attempt() == 1: // 50 more records are polled during this take
				close(started5)
				if err := wait(more); err != nil {
					return err
				}
			}
			if d.Attempt() <= fails[off] {
				return fmt.Errorf("transient failure of %d", off)
			}
			return nil
		}), runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	waitClosed(t, started5, "offset 5 was never handled")
	c.ProduceValues(t, "in", 0, numbered(150)[100:]...)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 150})
	stop(t, app)

	var wantOffs []int64
	var wantAtts []int
	for o := range int64(150) {
		for a := 1; a <= fails[o]+1; a++ {
			wantOffs = append(wantOffs, o)
			wantAtts = append(wantAtts, a)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, wantOffs, offs, "handler calls, in order")
	require.Equal(t, wantAtts, atts, "attempts")
}

// A retry in place in the middle of a key's take (ByKey, Tracked, fewer lanes than keys): each
// key's records run in order, the retried one again before everything behind it of its key, each
// record exactly as often as it fails plus once.
func TestTakeRetryInTheMiddleKeepsKeyOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	const n = 400
	var recs []*kgo.Record
	for i := range n {
		recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i%4), Value: fmt.Appendf(nil, "%d", i)})
	}
	c.ProduceTo(t, 0, recs...)
	// offsets in the middle of a key's take, at its end and at the start of the next one
	fails := map[int64]int{9: 1, 130: 2, 199: 1, 254: 1, 258: 1, 262: 3, 399: 1}
	obs := newTakeObserver()
	all := obs.delivered(0, n)
	var (
		mu    sync.Mutex
		byKey = map[string][]int64{}
		atts  = map[int64][]int{}
	)
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			off := d.Record().Offset
			mu.Lock()
			byKey[string(d.Record().Key)] = append(byKey[string(d.Record().Key)], off)
			atts[off] = append(atts[off], d.Attempt())
			mu.Unlock()
			if off < 4 && d.Attempt() == 1 { // every key's first take is cut from a full queue
				if err := await(ctx, all); err != nil {
					return err
				}
			}
			if d.Attempt() <= fails[off] {
				return fmt.Errorf("transient failure of %d", off)
			}
			return nil
		}), runtime.Workers(3), runtime.ByKey, runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: n})
	stop(t, app)

	mu.Lock()
	defer mu.Unlock()
	for k := range 4 {
		var want []int64
		for o := int64(k); o < n; o += 4 {
			for range fails[o] + 1 {
				want = append(want, o)
			}
		}
		require.Equal(t, want, byKey[fmt.Sprintf("k%d", k)], "handler calls of key k%d, in order", k)
	}
	for o := range int64(n) {
		var want []int
		for a := 1; a <= fails[o]+1; a++ {
			want = append(want, a)
		}
		require.Equal(t, want, atts[o], "attempts of offset %d", o)
	}
}

// A revoke while a lane holds a take of the revoked partition: the lane finishes the record in its
// handler and runs none of the take's later records; the member commits exactly what it handled
// and the next owner handles exactly the rest, once each. The kept partition is handled whole by
// the first member.
func TestTakeRevokeInTheMiddleHandsOverTheRest(t *testing.T) {
	c := numberedIn(t, 2, 100)
	sub := runtime.Topic("in").Group("g").Commit(runtime.Tracked)

	watch := newRevokeWatch()
	revoked := watch.revoked
	obsA := newTakeObserver()
	obsA.onRebal = watch.onRebal
	all0, all1 := obsA.delivered(0, 100), obsA.delivered(1, 100)
	blocked := map[int32]chan struct{}{0: make(chan struct{}), 1: make(chan struct{})}
	var aLog handledLog
	appA := runtime.New(appOpts(c, runtime.Observe(obsA))...)
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aLog.add(d)
		off := d.Record().Offset
		wait := func(ch <-chan struct{}) {
			select {
			case <-ch:
			case <-ctx.Done(): // only if the test failed and the App is shutting down
			}
		}
		switch off {
		case 0: // the take holding offset 10 is cut from a full queue
			wait(all0)
			wait(all1)
		case 10:
			close(blocked[d.Record().Partition])
			wait(revoked)
		}
		return nil
	}), runtime.Workers(2))
	start(t, appA)
	waitClosed(t, blocked[0], "A never reached offset 10 of partition 0")
	waitClosed(t, blocked[1], "A never reached offset 10 of partition 1")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 10, 1: 10})
	memberA := c.CommitLog().All()[0].Member

	bLog, px, py := handOver(t, c, sub, watch, 100, runtime.Workers(2))

	require.Equal(t, offsetRange(0, 11), aLog.offsets(px), "A's handler calls on the moved partition %d", px)
	require.Equal(t, offsetRange(11, 100), bLog.offsets(px), "B's handler calls on the moved partition %d", px)
	for _, cm := range c.CommitLog().Of("g", "in", px) {
		if cm.Member == memberA {
			require.LessOrEqual(t, cm.Offset, int64(11), "A commits nothing past what it handled on %d", px)
		}
	}
	requireKept(t, c, &aLog, bLog, py, 100)
}

// A lost partition while a lane holds a take of it: the handler's ctx is cancelled, the take's
// later records do not run in the lost generation, and the next generation handles everything
// from the committed offset, once each.
func TestTakeLostInTheMiddleRunsNothingMoreOfTheTake(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(100)...)
	obs := newTakeObserver()
	all := obs.delivered(0, 100)
	blocked := make(chan struct{})
	cause := make(chan error, 1)
	var log handledLog
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			log.add(d)
			if d.Generation() != 1 {
				return nil
			}
			switch d.Record().Offset {
			case 0:
				select {
				case <-all:
				case <-ctx.Done():
				}
			case 10:
				close(blocked)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil // a late ack: it counts for nothing
			}
			return nil
		}))
	start(t, app)
	waitClosed(t, blocked, "offset 10 was never handled")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 10})
	c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: "g", Err: kerr.UnknownMemberID})
	require.ErrorContains(t, <-cause, "partition lost")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 100})
	stop(t, app)

	var gen1, gen2 []int64
	for _, h := range log.all() {
		if h.gen == 1 {
			gen1 = append(gen1, h.off)
		} else {
			gen2 = append(gen2, h.off)
		}
	}
	require.Equal(t, offsetRange(0, 11), gen1, "the lost generation's handler calls")
	require.Equal(t, offsetRange(10, 100), gen2, "the next generation's handler calls")
	requireNonDecreasing(t, c, "g", "in", 0)
}

// A graceful Shutdown in the middle of a take (Tracked): the final commit is exactly what was
// handled, and a restarted member handles exactly the rest: nothing lost, nothing twice.
func TestTakeShutdownInTheMiddleLosesNothing(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(200)...)
	obs := newTakeObserver()
	all := obs.delivered(0, 200)
	started := make(chan struct{})
	release := make(chan struct{})
	var first handledLog
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			first.add(d)
			switch d.Record().Offset {
			case 0:
				if err := await(ctx, all); err != nil {
					return err
				}
			case 70: // in the second take
				close(started)
				if err := await(ctx, release); err != nil {
					return err
				}
			}
			return nil
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	waitClosed(t, started, "offset 70 was never handled")
	done := make(chan error, 1)
	go func() { done <- app.Shutdown(ctx) }()
	close(release)
	require.NoError(t, <-done)

	handled := first.offsets(0)
	require.GreaterOrEqual(t, len(handled), 71)
	require.Equal(t, offsetRange(0, int64(len(handled))), handled, "the first member's handler calls")
	require.Equal(t, map[int32]int64{0: int64(len(handled))}, c.Committed(t, "g", "in"),
		"the final commit is exactly what was handled")

	app2, second := startLogging(t, c, runtime.Topic("in").Group("g").Commit(runtime.Tracked), nil)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 200})
	stop(t, app2)
	require.Equal(t, offsetRange(int64(len(handled)), 200), second.offsets(0), "the restarted member's handler calls")
}

// A panic under PanicFail at offset 5, in the middle of a take of 0..63: Run returns the
// *PanicError, the records behind it in the take are never handled, and none of them is committed
// (DESIGN §3.8). Under Tracked the committed offset is exactly the panicking record; DESIGN §3.2
// lets Auto commit "its record", 6 at most, never the records behind it (a take marked as a whole
// before it was handled would commit up to 63 records no handler saw).
func TestTakePanicInTheMiddleCommitsNothingBehindIt(t *testing.T) {
	for _, tc := range []struct {
		mode      runtime.CommitMode
		committed []int64 // the committed offsets allowed
	}{
		{runtime.Tracked, []int64{5}},
		{runtime.Auto, []int64{5, 6}},
	} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, numbered(100)...)
			obs := newTakeObserver()
			all := obs.delivered(0, 100)
			var s seen
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(tc.mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					s.add(string(d.Record().Value), d.Attempt())
					switch d.Record().Offset {
					case 0:
						if err := await(ctx, all); err != nil {
							return err
						}
					case 5:
						panic("bad record")
					}
					return nil
				}))
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			var perr *runtime.PanicError
			require.ErrorAs(t, app.Run(ctx), &perr)
			require.Equal(t, int64(5), perr.Offset)
			require.Equal(t, numbered(6), s.values(), "handled 0..5")
			committed := c.Committed(t, "g", "in")
			require.Len(t, committed, 1)
			require.Contains(t, tc.committed, committed[0],
				"committed %d: records 6..%d were committed but never handled", committed[0], committed[0]-1)
		})
	}
}

// A graceful Shutdown under Auto in the middle of a take: the records of the take no handler was
// given (the lane stops between records once the App stops) must not be committed; DESIGN §3.2
// allows unprocessed records to be committed only after a crash or a rebalance. Record 0 is in
// its handler until Shutdown's bound passes and cancels its ctx.
func TestTakeAutoShutdownCommitsNoRecordNeverHandled(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(100)...)
	obs := newTakeObserver()
	all := obs.delivered(0, 100)
	running := make(chan struct{})
	var s seen
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g"), // Auto
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			s.add(string(d.Record().Value), d.Attempt())
			if d.Record().Offset == 0 && d.Attempt() == 1 {
				select {
				case <-all: // the first take holds 0..63
				case <-ctx.Done():
					return ctx.Err()
				}
				close(running)
				<-ctx.Done() // until Shutdown's bound passes
				return ctx.Err()
			}
			return nil
		}))
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	require.NoError(t, app.Start(sctx))
	waitClosed(t, running, "offset 0 was never handled")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.Error(t, app.Shutdown(ctx), "the drain bound passed")
	require.Equal(t, []string{"0"}, s.values(), "only record 0 reached a handler")
	committed := c.Committed(t, "g", "in")[0]
	require.LessOrEqual(t, committed, int64(1),
		"committed %d after a graceful shutdown: records 1..%d were never handled", committed, committed-1)
}

// A plain retry in the middle of a take under Transactional aborts the window: the take's
// unhandled records count Done on it exactly once (fewer would stall the window, more would let
// it commit records not yet handled), the window is read again, and every input ends with exactly
// one committed output.
func TestTakeTransactionalRetryInTheMiddleOfATake(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1))
	for p := range int32(2) {
		var vs []string
		for i := range 150 {
			vs = append(vs, fmt.Sprint(int(p)*1000+i))
		}
		c.ProduceValues(t, "in", p, vs...)
	}
	hwm := c.HighWatermarks(t, "in")
	failed := map[int64]bool{}
	var fmu sync.Mutex
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-take")),
		transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			off := d.Record().Offset
			if d.Record().Partition == 0 && (off == 10 || off == 70 || off == 149) {
				fmu.Lock()
				defer fmu.Unlock()
				if !failed[off] {
					failed[off] = true
					return runtime.Retry(errors.New("once"))
				}
			}
			return nil
		}), runtime.Workers(2), runtime.WindowTimeout(5*time.Second),
		runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	var got, want []string
	for _, r := range c.ReadAll(t, "out", true) {
		got = append(got, string(r.Value))
	}
	for p := range 2 {
		for i := range 150 {
			want = append(want, fmt.Sprintf("out-%d", p*1000+i))
		}
	}
	slices.Sort(got)
	slices.Sort(want)
	require.Equal(t, want, got, "exactly one output per input under read_committed")
	fmu.Lock()
	defer fmu.Unlock()
	require.Len(t, failed, 3)
}

// A partition at MaxInFlightPerPartition holds the poll loop off; a lane with nothing to do makes
// the poll loop pause the full partition in franz-go and poll again, so another partition's new
// records are handled while the full one is stuck: behind a blocked handler (two lanes), or behind
// a record retried in place (one lane, idle between retries).
func TestTakeFullPartitionDoesNotStarveAnother(t *testing.T) {
	cases := []struct {
		name    string
		workers int
		retry   bool
	}{
		{"blocked handler", 2, false},
		{"retried in place", 1, true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 2))
			c.ProduceValues(t, "in", 0, numbered(100)...)
			release := make(chan struct{})
			obs := &pauseObserver{observer: &observer{}}
			paused := make(chan struct{})
			var pOnce sync.Once
			obs.onPaused = func(e runtime.PausedEvent) {
				if e.Partition == 0 && e.Paused {
					pOnce.Do(func() { close(paused) })
				}
			}
			var log handledLog
			app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(20))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					log.add(d)
					if d.Record().Partition != 0 || d.Record().Offset != 0 {
						return nil
					}
					if tc.retry {
						select {
						case <-release:
							return nil
						default:
							return errors.New("not yet")
						}
					}
					select {
					case <-release:
						return nil
					case <-ctx.Done():
						return ctx.Err()
					}
				}), runtime.Workers(tc.workers), runtime.MaxInFlightPerPartition(8),
				runtime.Backoff(func(int, error) time.Duration { return 20 * time.Millisecond }))
			start(t, app)
			waitClosed(t, paused, "partition 0 was never paused")
			c.ProduceValues(t, "in", 1, numbered(10)...)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 0, 1: 10})
			require.Equal(t, offsetRange(0, 10), log.offsets(1))
			close(release)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 100, 1: 10})
			stop(t, app)
			var once []int64
			for _, o := range log.offsets(0) {
				if len(once) == 0 || once[len(once)-1] != o {
					once = append(once, o)
				}
			}
			require.Equal(t, offsetRange(0, 100), once, "partition 0's records in order (0 repeated while retried)")
			for i, o := range log.offsets(0)[1:] {
				if o == 0 {
					require.Equal(t, int64(0), log.offsets(0)[i], "only offset 0 repeats")
				}
			}
		})
	}
}

// HandleBatch under Tracked with a retried element in the middle of a batch, several batches
// queued at once: the retried element is the head of the next batch (nothing behind it runs
// first), every other element runs once, in order, and the position reaches the end.
func TestTakeBatchRetryInTheMiddleKeepsOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(100)...)
	obs := newTakeObserver()
	all := obs.delivered(0, 100)
	var (
		mu   sync.Mutex
		bs   [][]int64
		once = map[int64]bool{}
	)
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 16,
		runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
			out := make([]error, len(ds))
			if ds[0].Record().Offset == 0 && ds[0].Attempt() == 1 {
				select {
				case <-all:
				case <-ctx.Done():
				}
			}
			mu.Lock()
			defer mu.Unlock()
			var b []int64
			for i, d := range ds {
				off := d.Record().Offset
				b = append(b, off)
				if (off == 7 || off == 40) && !once[off] {
					once[off] = true
					out[i] = errors.New("once")
				}
			}
			bs = append(bs, b)
			return out
		}), runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 100})
	stop(t, app)
	mu.Lock()
	defer mu.Unlock()
	var firsts []int64
	seenOff := map[int64]int{}
	for i, b := range bs {
		for _, o := range b {
			seenOff[o]++
			if seenOff[o] == 1 {
				firsts = append(firsts, o)
			}
			if (o == 7 || o == 40) && seenOff[o] == 1 {
				require.Less(t, i+1, len(bs), "no batch after the one that retried %d", o)
				require.Equal(t, o, bs[i+1][0], "the batch after the one that retried %d starts with it: %v", o, bs)
			}
		}
	}
	require.Equal(t, offsetRange(0, 100), firsts, "first deliveries in order")
	for o := range int64(100) {
		want := 1
		if o == 7 || o == 40 {
			want = 2
		}
		require.Equal(t, want, seenOff[o], "deliveries of %d", o)
	}
}

// A revoke while the poll loop is held off by a full partition and the only lane is blocked in a
// handler: the rebalance goes through (the poll loop allowed it before holding), the moved
// partition's queued and taken records are dropped and resume, and the kept partition goes on:
// every record of both partitions is handled exactly once across the two members, in order.
func TestTakeRevokeWhileThePollLoopHolds(t *testing.T) {
	c := numberedIn(t, 2, 100)
	sub := runtime.Topic("in").Group("g").Commit(runtime.Tracked)
	watch := newRevokeWatch()
	revoked := watch.revoked
	blocked := make(chan struct{})
	var (
		bOnce    sync.Once
		blockedP int32
	)
	obsA := &pauseObserver{observer: &observer{}, onPaused: watch.onPaused}
	obsA.onRebal = watch.onRebal
	var aLog handledLog
	appA := runtime.New(appOpts(c, runtime.Observe(obsA), runtime.MaxPollRecords(20))...)
	runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		aLog.add(d)
		if d.Record().Offset == 3 {
			first := false
			bOnce.Do(func() { first = true; blockedP = d.Record().Partition; close(blocked) })
			if first {
				select {
				case <-revoked:
				case <-ctx.Done():
				}
			}
		}
		return nil
	}), runtime.Workers(1), runtime.MaxInFlightPerPartition(8))
	start(t, appA)
	waitClosed(t, blocked, "A never reached an offset 3")
	eventually(t, func() bool {
		return watch.pausedNow()[blockedP]
	}, "the blocked partition should be paused (held) while the lane is blocked")

	bLog, px, py := handOver(t, c, sub, watch, 100)
	a, b := aLog.offsets(px), bLog.offsets(px)
	require.Equal(t, offsetRange(0, 100), append(slices.Clone(a), b...),
		"moved partition %d: A's calls %v then B's %v are every offset once, in order", px, a, b)
	requireKept(t, c, &aLog, bLog, py, 100)
}
