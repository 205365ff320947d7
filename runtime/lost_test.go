package runtime_test

import (
	"context"
	"fmt"
	"slices"
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

// A lost partition is dropped at once: its running handler's ctx is cancelled, nothing it finishes
// afterwards is committed, and the partition is read again from the committed offset once the
// member rejoins (DESIGN §3.7).
func TestLostPartitionCommitsNothingAndCancelsHandlers(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	blocked := make(chan struct{})
	cause := make(chan error, 1)
	obs := &observer{}
	var s seen
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			s.add(fmt.Sprintf("%s@%d", d.Record().Value, d.Generation()), d.Attempt())
			if string(d.Record().Value) == "b" && d.Attempt() == 1 && len(cause) == 0 && d.Generation() == 1 {
				close(blocked)
				<-ctx.Done()
				cause <- context.Cause(ctx)
				return nil // an ack that arrives too late to count
			}
			return nil
		}))
	start(t, app)
	<-blocked
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Heartbeat}, Group: "g", Err: kerr.UnknownMemberID})
	require.ErrorContains(t, <-cause, "partition lost")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	stop(t, app)
	// b was read again in the next generation; the late ack of generation 1 committed nothing.
	require.Equal(t, []string{"a@1", "b@1", "b@2", "c@2"}, s.values())
	obs.mu.Lock()
	defer obs.mu.Unlock()
	var kinds []string
	for _, e := range obs.rebal {
		kinds = append(kinds, e.Kind)
	}
	require.Equal(t, []string{"assigned", "lost", "assigned", "revoked"}, kinds)
}

// Start(Latest) skips what was produced before the group's first start; a committed offset wins
// over it afterwards (DESIGN §3.10).
func TestStartLatestSkipsTheBacklog(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "old-1", "old-2")
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Start(runtime.Latest),
		s.handler())
	start(t, app)
	// The start offset is resolved after the assignment, so produce until one new record is seen.
	eventually(t, func() bool {
		if s.len() > 0 {
			return true
		}
		c.ProduceValues(t, "in", 0, "new")
		return false
	}, "no new record handled")
	for _, v := range s.values() {
		require.Equal(t, "new", v, "a record of the backlog was handled")
	}
}

// Unordered lanes keep no order: later records of a partition finish while an earlier one is
// blocked, and the committed offset still waits for it (DESIGN §3.1, §3.6).
func TestUnorderedLanesPassABlockedRecord(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	vals := make([]string, 10)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	c.ProduceValues(t, "in", 0, vals...)
	release := make(chan struct{})
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 0 {
				if err := await(ctx, release); err != nil {
					return err
				}
			}
			s.add(string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.Workers(4), runtime.Unordered)
	start(t, app)
	eventually(t, func() bool { return s.len() == 9 }, "records behind the blocked one did not finish")
	// Nothing past offset 0 while it is in flight (a commit of 0 itself is allowed).
	for p, off := range c.Committed(t, "g", "in") {
		require.LessOrEqual(t, off, int64(0), "partition %d committed past offset 0 while it is in flight", p)
	}
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 10})
}

// Under Unordered, with every lane busy, Shutdown drops the records waiting for a lane unhandled
// and uncommitted. Both lanes here block until Shutdown's bound cancels them: nothing is handled to
// completion, nothing is committed, and a restarted member handles every record once.
func TestUnorderedShutdownDropsRecordsWaitingForALane(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(10)...)
	obs := newTakeObserver()
	all := obs.delivered(0, 10)
	busy := make(chan struct{}, 2)
	var first handledLog
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			first.add(d)
			busy <- struct{}{}
			<-ctx.Done() // Shutdown's bound passes
			return ctx.Err()
		}), runtime.Workers(2), runtime.Unordered)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	<-busy
	<-busy // both lanes hold a record; the rest wait for a lane
	waitClosed(t, all, "the 10 records were never delivered")
	sctx, scancel := context.WithTimeout(ctx, 300*time.Millisecond)
	defer scancel()
	require.ErrorIs(t, app.Shutdown(sctx), context.DeadlineExceeded)
	require.Len(t, first.offsets(0), 2, "only the two records in a lane reached the handler")
	require.LessOrEqual(t, c.Committed(t, "g", "in")[0], int64(0), "nothing finished: nothing committed past 0")

	app2, second := startLogging(t, c, runtime.Topic("in").Group("g").Commit(runtime.Tracked), nil,
		runtime.Workers(2), runtime.Unordered)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 10})
	stop(t, app2)
	got := second.offsets(0)
	slices.Sort(got)
	require.Equal(t, offsetRange(0, 10), got, "the restarted member's handler calls")
}

// Auto with ByKey marks each finished record, so a graceful shutdown can commit past records of
// another key that never finished or never ran (docs/commit-modes.md): key a's first record blocks
// until Shutdown's bound cancels it, a's second waits behind it, b's record finishes and marks
// offset 2. Auto commits 3 (two records lost); Tracked, in the same run, commits 0.
func TestAutoByKeyGracefulShutdownCanCommitUnhandledRecords(t *testing.T) {
	for _, tc := range []struct {
		mode runtime.CommitMode
		want int64
	}{{runtime.Auto, 3}, {runtime.Tracked, 0}} {
		t.Run(tc.mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceTo(t, 0, &kgo.Record{Topic: "in", Key: []byte("a"), Value: []byte("a0")},
				&kgo.Record{Topic: "in", Key: []byte("a"), Value: []byte("a1")},
				&kgo.Record{Topic: "in", Key: []byte("b"), Value: []byte("b0")})
			var s seen
			blocked := make(chan struct{})
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(tc.mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if string(d.Record().Value) == "a0" {
						close(blocked)
						<-ctx.Done() // until Shutdown's bound passes
						return ctx.Err()
					}
					s.add(string(d.Record().Value), d.Attempt())
					return nil
				}), runtime.Workers(2), runtime.ByKey)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			require.NoError(t, app.Start(ctx))
			waitClosed(t, blocked, "a0 never ran")
			eventually(t, func() bool { return s.len() == 1 }, "b0 never finished")
			short, cancelShort := context.WithTimeout(ctx, 200*time.Millisecond)
			defer cancelShort()
			require.ErrorIs(t, app.Shutdown(short), context.DeadlineExceeded)
			require.Equal(t, []string{"b0"}, s.values(), "a1 never ran")
			require.Equal(t, map[int32]int64{0: tc.want}, c.Committed(t, "g", "in"))
		})
	}
}
