package runtime_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A log truncation (a new leader whose log ends below what was fetched: an unclean leader
// election) rewinds franz-go to the new end offset, 6 here, while 3 is still in its handler and 4
// and 5 are queued behind it. Nothing delivers 3, 4 and 5 again, so they stay in flight: the
// committed offset stays at 3, and a restart handles 3 onwards (helper-87: the tracker's rewind
// dropped them and the group committed 6, and a crash then lost 3, 4 and 5).
func TestTrackedTruncationBelowTheFetchedKeepsEarlierRecordsInFlight(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var vals []string
	for i := range 20 {
		vals = append(vals, fmt.Sprint(i))
	}
	c.ProduceValues(t, "in", 0, vals...)

	started := make(chan struct{})
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 3 {
				close(started) // one lane: 3 is handled once, before Shutdown cancels it
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	startNoCleanup(t, app)
	<-started
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})

	truncateAt(c, "in", 6) // the leader changed; its log diverges at 6
	eventually(t, func() bool { return obs.deliveredRecords() == 20+14 }, "6..19 not fetched again (delivered %d)", obs.deliveredRecords())

	// Shutdown cancels 3 at its drain bound and commits what finished: the watermark, 3.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Error(t, app.Shutdown(ctx))
	require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "g", "in"))
	require.Equal(t, []int64{0, 1, 2}, obs.settledOffsets()[:3])

	var s seen
	app2 := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app2, runtime.Topic("in").Commit(runtime.Tracked), s.handler())
	start(t, app2)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20})
	require.Equal(t, vals[3:], s.values())
}

// The same truncation while 6..19 are still queued behind 3: franz-go fetches 6..19 again, and the
// queued ones are dropped, not handled beside their new copies, in both modes that queue records
// outside a window. Every offset is handled once and the group commits 20. The old code handled
// 6..19 twice (the tracker no longer counted the first ones, but their handlers ran).
func TestTruncationDropsTheRecordsQueuedFromTheFirstFetch(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(fmt.Sprint(mode), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			hwm := produceInputs(t, c, 20, 1)
			started, release := make(chan struct{}), make(chan struct{})
			var mu sync.Mutex
			handled := map[int64]int{}
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					mu.Lock()
					handled[d.Record().Offset]++
					mu.Unlock()
					if d.Record().Offset == 3 {
						close(started) // one lane: 4..19 wait behind 3
						return await(ctx, release)
					}
					return nil
				}))
			var once sync.Once
			releaseOnce := func() { once.Do(func() { close(release) }) }
			start(t, app)
			t.Cleanup(releaseOnce) // before start's stop, should an assertion fail first
			eventually(t, func() bool {
				select {
				case <-started:
					return true
				default:
					return false
				}
			}, "3 never reached its handler")
			truncateAt(c, "in", 6)
			eventually(t, func() bool { return obs.deliveredRecords() == 20+14 }, "6..19 not fetched again (delivered %d)", obs.deliveredRecords())
			releaseOnce()
			c.WaitCommitted(t, "g", "in", hwm)
			stop(t, app)
			want := map[int64]int{}
			for off := range int64(20) {
				want[off] = 1
			}
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, want, handled)
		})
	}
}

// Under Transactional the same truncation would have the records queued from the first fetch, 6..19,
// handled beside their new copies in one window, and both outputs committed in one transaction.
// A rewind within a window aborts it instead: it is read again from the committed offsets, and
// every input has exactly one output.
func TestTransactionalTruncationReadsTheWindowAgain(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 20, 1)
	started, release := make(chan struct{}), make(chan struct{})
	var once atomic.Bool
	obs := &observer{}
	var app *runtime.App
	app = txnAppWith(c, []runtime.Option{runtime.Observe(obs)}, "tx-truncation", func(*runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "3" && once.CompareAndSwap(false, true) {
				close(started)
				return await(ctx, release)
			}
			return nil
		})
	})
	start(t, app)
	<-started
	truncateAt(c, "in", 6)
	eventually(t, func() bool { return obs.deliveredRecords() == 20+14 }, "6..19 not fetched again (delivered %d)", obs.deliveredRecords())
	close(release)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	requireOneOutputPerInput(t, c, 20)
}

// truncateAt makes topic's fetches fail with FENCED_LEADER_EPOCH and answers franz-go's
// OffsetForLeaderEpoch with end offset at, as a new leader whose log ends there would: franz-go
// then fetches from at.
//
// Every fetch of topic fails until franz-go has asked: one faulted fetch is not always followed by
// the question (about 1 run in 10 of TestTransactionalTruncationReadsTheWindowAgain under -race
// waited 30 s for a rewind that never came), and the test is about the rewind, not that race.
func truncateAt(c *kfaketest.Cluster, topic string, at int64) {
	k := c.Kfake()
	var answered atomic.Bool
	k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: topic, Err: kerr.FencedLeaderEpoch, Count: -1,
		When: func(kmsg.Request) bool { return !answered.Load() }})
	k.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		defer answered.Store(true)
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, at
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
}
