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
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tests of the per-partition backlogs of Auto and Tracked (runtime/dispatch.go admitLocked,
// flowLocked, holdLocked, waitRoom): records polled beyond a partition's room wait in its backlog
// and must all be admitted, handled once and in order, and never committed before they are handled.

// waitCommittedWithin is c.WaitCommitted with a shorter bound, for tests that expect a stall to be
// possible: it returns the last error instead of failing.
func waitCommittedWithin(c *kfaketest.Cluster, d time.Duration, group, topic string, want map[int32]int64) error {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	defer cancel()
	return c.WaitCommittedContext(ctx, group, topic, want)
}

// totalDelivered sums the records of every Delivered event.
func (o *observer) totalDelivered() int {
	o.mu.Lock()
	defer o.mu.Unlock()
	n := 0
	for _, e := range o.delivered {
		n += e.Records
	}
	return n
}

// offsetLog records the offsets handled per partition, in call order.
type offsetLog struct {
	mu   sync.Mutex
	offs map[int32][]int64
}

func (l *offsetLog) add(r *kgo.Record) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.offs == nil {
		l.offs = map[int32][]int64{}
	}
	l.offs[r.Partition] = append(l.offs[r.Partition], r.Offset)
}

func (l *offsetLog) of(p int32) []int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.offs[p])
}

func (l *offsetLog) total() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, o := range l.offs {
		n += len(o)
	}
	return n
}

// startGated starts an App on c's topic "in" (numberedIn(t, 3, 4)) whose handler finishes
// nothing before all 12 records were polled, and logs what it handled.
func startGated(t *testing.T, c *kfaketest.Cluster, mode runtime.CommitMode, opts ...runtime.HandleOption) (*offsetLog, *takeObserver) {
	t.Helper()
	obs := newTakeObserver()
	all := []<-chan struct{}{obs.delivered(0, 4), obs.delivered(1, 4), obs.delivered(2, 4)}
	log := &offsetLog{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			for _, ch := range all {
				if err := await(ctx, ch); err != nil {
					return err
				}
			}
			log.add(d.Record())
			return nil
		}), opts...)
	start(t, app)
	return log, obs
}

// requireAllHandled waits (kfaketest.WaitTimeout at most) until startGated's group has committed n on each of its 3
// partitions, and requires that each partition's records 0..n-1 were handled once, in order.
func requireAllHandled(t *testing.T, c *kfaketest.Cluster, log *offsetLog, obs *takeObserver, n int64) {
	t.Helper()
	err := waitCommittedWithin(c, kfaketest.WaitTimeout, "g", "in", map[int32]int64{0: n, 1: n, 2: n})
	require.NoError(t, err, "handled per partition: %v %v %v; delivered %d",
		log.of(0), log.of(1), log.of(2), obs.totalDelivered())
	for p := range int32(3) {
		require.Equal(t, offsetRange(0, n), log.of(p), "partition %d: each record once, in order", p)
	}
}

// MaxInFlight across partitions: three partitions of 4 records arrive in one poll under
// MaxInFlight(4). The first partition takes the whole subscription's room, the other two wait in
// their backlogs. When the first drains, the subscription leaves allPaused and the backlogs are
// offered the room in turn: the first one offered fills the room to MaxInFlight and empties its
// backlog, the last one gets nothing and holds nothing in flight. Every record must still be
// handled and committed: the third partition's backlog must be admitted once the room frees up.
func TestBacklogMaxInFlightAdmitsEveryPartition(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := numberedIn(t, 3, 4)
			log, obs := startGated(t, c, mode, runtime.MaxInFlight(4))
			requireAllHandled(t, c, log, obs, 4)
		})
	}
}

// The same stranding with MaxInFlightPerPartition(4): the stranded backlog is a full bound, so it
// holds the poll loop off; once the other partitions resume and a lane idles, waitRoom pauses the
// stranded partition in franz-go, and records produced to it later never reach the runtime either.
// Every record, the later ones included, must be handled and committed.
func TestBacklogMaxInFlightStrandedPartitionRecoversWithNewRecords(t *testing.T) {
	c := numberedIn(t, 3, 4)
	log, obs := startGated(t, c, runtime.Tracked, runtime.MaxInFlight(4), runtime.MaxInFlightPerPartition(4))
	eventually(t, func() bool { return log.total() >= 8 }, "two partitions were never handled")
	for p := range int32(3) {
		c.ProduceValues(t, "in", p, "late")
	}
	requireAllHandled(t, c, log, obs, 5)
}

// A revoke while the moved partition has a backlog (20 records, MaxInFlightPerPartition(4), its
// second record running): its queued records and its backlog are dropped, the commit covers exactly
// what was handled (2), and the next owner starts there. Nothing is lost, nothing handled twice,
// under Auto as under Tracked.
func TestBacklogDroppedAtRevokeIsReadByTheNextOwner(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := numberedIn(t, 2, 20)
			sub := runtime.Topic("in").Group("g").Commit(mode)
			watch := newRevokeWatch()
			obsA := newTakeObserver()
			obsA.onRebal = watch.onRebal
			full := []<-chan struct{}{obsA.delivered(0, 20), obsA.delivered(1, 20)}
			var aLog handledLog
			appA := runtime.New(appOpts(c, runtime.Observe(obsA))...)
			runtime.Handle(appA, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
				aLog.add(d)
				if d.Record().Offset != 1 {
					return nil
				}
				for _, ch := range append(full, watch.revoked) {
					if err := await(ctx, ch); err != nil {
						return err
					}
				}
				return nil
			}), runtime.Workers(2), runtime.MaxInFlightPerPartition(4))
			start(t, appA)
			for _, ch := range full {
				waitClosed(t, ch, "A never polled all 40 records")
			}
			eventually(t, func() bool {
				return slices.Equal(aLog.offsets(0), []int64{0, 1}) && slices.Equal(aLog.offsets(1), []int64{0, 1})
			}, "A is not blocked on offset 1 of both partitions: %v", aLog.all())
			_, bLog := startLogging(t, c, sub, nil, runtime.Workers(2))
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20, 1: 20})
			px, py := watch.movedOne(t, "in")
			require.Equal(t, []int64{0, 1}, aLog.offsets(px), "A on the moved partition")
			require.Equal(t, offsetRange(2, 20), bLog.offsets(px), "B starts at A's commit: exactly what A handled")
			requireKept(t, c, &aLog, bLog, py, 20)
		})
	}
}

// Shutdown with a backlog under Auto and Tracked: once the dispatcher stops, neither the backlog nor
// the queued records are handled, and the final commit is exactly past the last handled record
// (offset 5 runs when Shutdown starts).
func TestBacklogAtShutdownIsNotCommitted(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, numbered(50)...)
			obs := newTakeObserver()
			full := obs.delivered(0, 50)
			running, release := make(chan struct{}), newGate()
			var log offsetLog
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					log.add(d.Record())
					if d.Record().Offset == 5 {
						close(running)
						<-release.ch
					}
					return nil
				}), runtime.MaxInFlightPerPartition(4))
			start(t, app)
			waitClosed(t, full, "the 50 records were never polled")
			waitClosed(t, running, "offset 5 never ran")
			done := make(chan error, 1)
			go func() {
				ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
				defer cancel()
				done <- app.Shutdown(ctx)
			}()
			eventually(t, func() bool { s, _ := app.State(); return s == runtime.StateShuttingDown }, "no shutdown")
			release.open()
			require.NoError(t, <-done)
			// Lanes may handle a few more records between the state change and the dispatcher's
			// stop; whatever ran, ran once and in order, and the commit covers exactly that.
			handled := log.of(0)
			require.GreaterOrEqual(t, len(handled), 6, "the running record finished")
			require.Equal(t, offsetRange(0, int64(len(handled))), handled, "handled in order, each once")
			require.Equal(t, map[int32]int64{0: int64(len(handled))}, c.Committed(t, "g", "in"),
				"committed exactly what was handled, nothing of the backlog beyond it")
		})
	}
}

// Retry copies that arrive before they are due are parked and count against the bound: with
// MaxInFlightPerPartition(2) and every original failing once with RetryAfter, the partition's room
// is often taken by parked copies only. Every original and every copy is handled exactly once, and
// the committed offset reaches the end (originals + copies).
func TestBacklogWithParkedRetryCopies(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(10)...)
	var s seen
	app := runtime.New(appOpts(c, runtime.MaxPollRecords(3))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			s.add(string(d.Record().Value), d.Attempt())
			if d.Attempt() == 1 {
				return runtime.RetryAfter(150*time.Millisecond, errors.New("once"))
			}
			return nil
		}), runtime.MaxInFlightPerPartition(2), runtime.Workers(2))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20})
	got := map[string][]int{}
	vals, atts := s.values(), s.attempts()
	for i, v := range vals {
		got[v] = append(got[v], atts[i])
	}
	require.Len(t, vals, 20, "%v %v", vals, atts)
	for _, v := range numbered(10) {
		require.Equal(t, []int{1, 2}, got[v], "value %s", v)
	}
	stop(t, app)
}

// Under ByKey, a key blocked at the head of a partition with a backlog: the other keys' records keep
// being admitted from the backlog and handled in order per key; once the blocked key is released,
// everything is handled once and committed. Tracked only commits past offset 0 once it finished.
func TestBacklogByKeyBlockedKey(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			var recs []*kgo.Record
			for i := range 120 {
				recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i%6), Value: fmt.Appendf(nil, "%d", i)})
			}
			c.ProduceTo(t, 0, recs...)
			release := newGate()
			var mu sync.Mutex
			perKey := map[string][]int64{}
			app := runtime.New(appOpts(c, runtime.MaxPollRecords(7))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if d.Record().Offset == 0 && !release.wait(ctx) {
						return ctx.Err()
					}
					mu.Lock()
					perKey[string(d.Record().Key)] = append(perKey[string(d.Record().Key)], d.Record().Offset)
					mu.Unlock()
					return nil
				}), runtime.ByKey, runtime.Workers(3), runtime.MaxInFlightPerPartition(8))
			start(t, app)
			t.Cleanup(release.open) // runs before the App's stop if the test fails
			// k0's offset 0 blocks k0 (offsets 0, 6, 12, ...), all held; the other keys still run.
			eventually(t, func() bool {
				mu.Lock()
				defer mu.Unlock()
				return len(perKey["k1"]) > 0
			}, "no other key ran while k0 was blocked")
			if mode == runtime.Tracked {
				require.LessOrEqual(t, c.Committed(t, "g", "in")[0], int64(0), "Tracked: nothing past offset 0")
			}
			release.open()
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 120})
			mu.Lock()
			defer mu.Unlock()
			for k := range 6 {
				var want []int64
				for o := int64(k); o < 120; o += 6 {
					want = append(want, o)
				}
				require.Equal(t, want, perKey[fmt.Sprint("k", k)], "key k%d: each record once, in order", k)
			}
		})
	}
}

// HandleBatch under Unordered across partitions with small bounds and backlogs: every record of
// every partition is handled exactly once and the committed offsets reach the ends.
func TestBacklogUnorderedBatches(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := numberedIn(t, 3, 100)
			var log offsetLog
			app := runtime.New(appOpts(c, runtime.MaxPollRecords(9))...)
			runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(mode), 5,
				runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
					for _, d := range ds {
						log.add(d.Record())
					}
					return make([]error, len(ds))
				}), runtime.Unordered, runtime.Workers(3), runtime.MaxInFlightPerPartition(6))
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 100, 1: 100, 2: 100})
			for p := range int32(3) {
				require.Equal(t, offsetRange(0, 100), slices.Sorted(slices.Values(log.of(p))), "partition %d: each once", p)
			}
		})
	}
}

// A Tracked in-place retry in the middle of a partition with a backlog: the retried record runs
// again before every record behind it, each record runs once otherwise, in order.
func TestBacklogInPlaceRetryKeepsOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(40)...)
	var log offsetLog
	failed := map[int64]bool{}
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			log.add(d.Record())
			o := d.Record().Offset
			if o%7 == 3 && !failed[o] { // lanes run one at a time: Workers(1)
				failed[o] = true
				return runtime.Retry(errors.New("again"))
			}
			return nil
		}), runtime.MaxInFlightPerPartition(4), runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 40})
	var want []int64
	for o := int64(0); o < 40; o++ {
		want = append(want, o)
		if o%7 == 3 {
			want = append(want, o)
		}
	}
	require.Equal(t, want, log.of(0))
}

// committedHook is observer with a hook on Committed events.
type committedHook struct {
	*observer
	onCommitted func(runtime.CommittedEvent)
}

func (o *committedHook) Committed(e runtime.CommittedEvent) {
	if o.onCommitted != nil {
		o.onCommitted(e)
	}
}

// Shutdown past its drain bound under Tracked, with a backlog: offset 5 is still running when the
// final marks (watermark 5) are committed; it then returns. The records behind it (6, 7, queued,
// and the backlog) were never handled, so nothing past 6 may ever be committed: not by the final
// commit, nor by the revoke that leaving the group runs afterwards. Were the lane that finishes
// offset 5 to admit backlog records into the tracker after its final Reset, their new generation's
// watermark (8) would be marked and committed by that revoke.
func TestBacklogShutdownPastDrainBoundCommitsNothingUnhandled(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(50)...)
	cancelled, returning := make(chan struct{}), make(chan struct{})
	finalCommit := newGate()
	obs := &committedHook{observer: &observer{}}
	obs.onCommitted = func(e runtime.CommittedEvent) {
		select {
		case <-cancelled: // after the drain bound: this is Shutdown's final commit
			finalCommit.open()
			<-returning // offset 5's handler returns before Shutdown goes on to leave the group
		default:
		}
	}
	running := make(chan struct{})
	var log offsetLog
	// No autocommit before Shutdown: its final commit (5) is the first, and reported.
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.ClientOpts(kgo.AutoCommitInterval(time.Hour)))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			log.add(d.Record())
			if d.Record().Offset == 5 {
				close(running)
				<-ctx.Done() // the drain bound passed
				close(cancelled)
				select { // ignores its ctx until the final commit is made
				case <-finalCommit.ch:
				case <-time.After(5 * time.Second): // only if the final commit never comes: no hang
				}
				close(returning)
			}
			return nil
		}), runtime.MaxInFlightPerPartition(4))
	sctx, scancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer scancel()
	require.NoError(t, app.Start(sctx)) // not start: its cleanup's Shutdown would return this one's error
	waitClosed(t, running, "offset 5 never ran")
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, app.Shutdown(ctx), context.DeadlineExceeded)
	require.Equal(t, offsetRange(0, 6), log.of(0))
	for _, cm := range c.CommitLog().Of("g", "in", 0) {
		require.LessOrEqual(t, cm.Offset, int64(6), "a commit past records never handled: %v", offsetsOf(c.CommitLog().Of("g", "in", 0)))
	}
	require.Equal(t, map[int32]int64{0: 5}, c.Committed(t, "g", "in"))
}
