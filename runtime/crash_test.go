package runtime_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A SIGKILLed Tracked consumer loses nothing: it had committed exactly the lowest offset still
// in flight (5, while 6..19 had finished), and the restarted instance (same InstanceID) resumes
// at that commit, handling 5..19 again, so every record without a return before the kill returns
// after it; a crash only duplicates work (DESIGN §3.1, §3.7, §5).
func TestCrashTrackedResumesAtLowestInFlight(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		runCrashChild(t, env)
		return
	}
	const n = 20
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	recs := make([]*kgo.Record, n)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%02d", i), Value: fmt.Appendf(nil, "v%02d", i)}
	}
	c.ProduceTo(t, 0, recs...)
	for i, r := range recs {
		require.Equal(t, int64(i), r.Offset)
	}

	p := c.Spawn(t, nil)
	// Run 1: offset 5 blocks forever, the 19 others return.
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return len(returnsOf(evs, 1)) == n-1 })
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5})
	p.Kill(t)
	before := c.CommitLog().Of("g", "in", 0) // every commit of run 1: it is dead
	require.NotEmpty(t, before)
	lastBefore := before[len(before)-1].Offset
	require.Equal(t, int64(5), lastBefore, "last commit before the kill: %v", offsetsOf(before))
	for _, cm := range before {
		require.Equal(t, p.InstanceID()+"-0", cm.InstanceID, "commits come from the static member")
	}

	// Run 2: nothing blocks.
	p.Restart(t)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return slices.Contains(returnsOf(evs, 2), 5) })
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: n})
	p.Kill(t)

	evs := p.Events()
	var want1, want2 []int64
	for i := range int64(n) {
		want1 = append(want1, i)
		if i >= lastBefore {
			want2 = append(want2, i)
		}
	}
	require.Equal(t, want1, sortedOffsets(startsOf(evs, 1)), "run 1 starts every record once")
	require.Equal(t, slices.DeleteFunc(slices.Clone(want1), func(o int64) bool { return o == 5 }), sortedOffsets(returnsOf(evs, 1)),
		"run 1 returns every record but 5")
	starts2 := startsOf(evs, 2)
	require.Equal(t, want2, sortedOffsets(starts2), "run 2 starts exactly at the commit (5) and handles 5..19 once each")
	require.Equal(t, want2, sortedOffsets(returnsOf(evs, 2)), "run 2 returns 5..19")
	require.Equal(t, lastBefore, slices.Min(starts2), "run 2's first delivery is the last commit before the kill")
	for _, e := range evs {
		if e.Kind == kfaketest.EventStart {
			require.Equal(t, 1, e.Attempt, "no record is retried: %+v", e)
		}
	}

	// Nothing lost: every offset without a return in run 1 has one in run 2.
	ret1, ret2 := returnsOf(evs, 1), returnsOf(evs, 2)
	for i := range int64(n) {
		if !slices.Contains(ret1, i) {
			require.Contains(t, ret2, i, "offset %d returned in neither run", i)
		}
	}
	requireNonDecreasing(t, c, "g", "in", 0)
	require.Equal(t, map[int32]int64{0: n}, c.Committed(t, "g", "in"))
}

// runCrashChild is the child of TestCrashTrackedResumesAtLowestInFlight: a Tracked App with four
// ByKey lanes whose handler logs each record's start and return; in run 1 offset 5 never returns.
// It never returns itself: the parent kills it.
func runCrashChild(t *testing.T, env kfaketest.ChildEnv) {
	app := runtime.New(
		runtime.Brokers(env.Brokers...), // required even when ClientOpts has seeds (DESIGN §3.10)
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.InstanceID(env.InstanceID),
		runtime.Logger(testLogger()),
	)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			r := d.Record()
			env.Log.Start(r.Topic, r.Partition, r.Offset, d.Attempt())
			if env.Run == 1 && r.Offset == 5 {
				select {} // blocks until the SIGKILL
			}
			env.Log.Return(r.Topic, r.Partition, r.Offset, "ack")
			return nil
		}), runtime.Workers(4), runtime.ByKey)
	err := app.Run(context.Background())
	// Run never returns on its own here; if it does, the parent sees the child exit.
	t.Fatalf("child run %d: Run returned: %v", env.Run, err)
}

func startsOf(evs []kfaketest.Event, run int) []int64 {
	return offsetsOfKind(evs, run, kfaketest.EventStart)
}

func returnsOf(evs []kfaketest.Event, run int) []int64 {
	return offsetsOfKind(evs, run, kfaketest.EventReturn)
}

func offsetsOfKind(evs []kfaketest.Event, run int, kind string) []int64 {
	var out []int64
	for _, e := range evs {
		if e.Run == run && e.Kind == kind {
			out = append(out, e.Offset)
		}
	}
	return out
}

func sortedOffsets(s []int64) []int64 { return slices.Sorted(slices.Values(s)) }

// A delayed retry survives a crash: the copy is in Kafka before the original completes, the
// committed offset stops at the parked copy, and after a SIGKILL the restarted consumer handles the
// copy once it is due, not before; the original, committed before the kill, is not handled again
// (DESIGN §3.3).
func TestCrashWithAParkedRetryCopyLosesNothing(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		runRetryCrashChild(t, env)
		return
	}
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "pay")
	p := c.Spawn(t, nil)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return slices.Contains(returnsOf(evs, 1), 0) })
	// The copy (offset 1) is parked until due, so the position stops at it.
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	require.Equal(t, map[int32]int64{0: 2}, c.HighWatermarks(t, "in"), "the copy was produced before the original completed")
	p.Kill(t)
	for _, cm := range c.CommitLog().Of("g", "in", 0) {
		require.LessOrEqual(t, cm.Offset, int64(1), "nothing committed past the parked copy")
	}

	p.Restart(t)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return slices.Contains(returnsOf(evs, 2), 1) })
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	p.Kill(t)
	evs := p.Events()
	if starts := startsOf(evs, 1); !slices.Equal(starts, []int64{0}) { // the kill came after the copy was due
		require.Equal(t, []int64{0, 1}, starts, "run 1 handled the original and parked its copy")
	}
	require.Equal(t, []int64{0}, returnsOf(evs, 1), "run 1 finished only the original")
	require.Equal(t, []int64{1}, startsOf(evs, 2), "run 2 handles the copy once and never the committed original")
	for _, e := range evs {
		require.NotEqual(t, kfaketest.EventNote, e.Kind, "a copy was handled before its not-before time: %+v", e)
		if e.Kind == kfaketest.EventStart && e.Offset == 1 {
			require.Equal(t, 2, e.Attempt)
		}
	}
}

// runRetryCrashChild asks for RetryAfter(1500ms) on a record's first attempt and acks copies,
// noting any copy handled before its not-before time. Run 1 never returns from a copy, so whenever
// the kill comes, it has committed nothing past it.
func runRetryCrashChild(t *testing.T, env kfaketest.ChildEnv) {
	app := runtime.New(
		runtime.Brokers(env.Brokers...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.InstanceID(env.InstanceID),
		runtime.Logger(testLogger()),
	)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			r := d.Record()
			env.Log.Start(r.Topic, r.Partition, r.Offset, d.Attempt())
			if nb, ok := retry.NotBefore(r); ok && time.Now().Before(nb) {
				env.Log.Note("early", fmt.Sprintf("offset %d handled %s before its not-before", r.Offset, time.Until(nb)))
			}
			if d.Attempt() == 1 {
				env.Log.Return(r.Topic, r.Partition, r.Offset, "retry_after")
				return runtime.RetryAfter(1500*time.Millisecond, fmt.Errorf("bank busy"))
			}
			if env.Run == 1 { // the kill may come after the copy is due: run 1 never finishes it
				select {}
			}
			env.Log.Return(r.Topic, r.Partition, r.Offset, "ack")
			return nil
		}))
	err := app.Run(context.Background())
	t.Fatalf("child run %d: Run returned: %v", env.Run, err)
}

// A retried batch element holds the committed position just before it; elements acked after it
// are read again after a crash: duplicates, never loss (DESIGN §3.5).
func TestCrashWithARetriedBatchElement(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		runBatchCrashChild(t, env)
		return
	}
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "e0", "e1", "e2", "e3", "e4")
	p := c.Spawn(t, nil)
	// Run 1: the batch [0..4] acks all but 1, whose in-place redelivery blocks.
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return len(startsOf(evs, 1)) == 6 })
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	p.Kill(t)
	p.Restart(t)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return len(returnsOf(evs, 2)) == 4 })
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5})
	p.Kill(t)
	evs := p.Events()
	require.Equal(t, []int64{0, 1, 2, 3, 4, 1}, startsOf(evs, 1))
	require.Equal(t, []int64{1, 2, 3, 4}, sortedOffsets(startsOf(evs, 2)), "element 0 is not handled again")
}

// runBatchCrashChild handles batches of up to 5; in run 1 element 1 fails once and its redelivery
// blocks until the SIGKILL.
func runBatchCrashChild(t *testing.T, env kfaketest.ChildEnv) {
	app := runtime.New(
		runtime.Brokers(env.Brokers...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.InstanceID(env.InstanceID),
		runtime.Logger(testLogger()),
	)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 5,
		runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
			out := make([]error, len(ds))
			for i, d := range ds {
				r := d.Record()
				env.Log.Start(r.Topic, r.Partition, r.Offset, d.Attempt())
				if env.Run == 1 && r.Offset == 1 {
					if d.Attempt() > 1 {
						select {} // blocks until the SIGKILL
					}
					out[i] = runtime.Retry(fmt.Errorf("once"))
					continue
				}
				env.Log.Return(r.Topic, r.Partition, r.Offset, "ack")
			}
			return out
		}), fastBackoff)
	err := app.Run(context.Background())
	t.Fatalf("child run %d: Run returned: %v", env.Run, err)
}

// A SIGKILLed Transactional consumer restarted with the same transactional id fences its zombie,
// aborts its open transaction, and resumes from the committed offsets: exactly one output per input
// under read_committed (DESIGN §3.4).
func TestCrashTransactionalExactlyOnce(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		runTxnCrashChild(t, env)
		return
	}
	const n = 300
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, n, 2)
	p := c.Spawn(t, nil)
	c.CommitLog().Wait(t, func(cs []kfaketest.Commit) bool { return len(cs) >= 2 }) // one window committed
	p.Kill(t)
	// Not c.Committed: an open transaction's TxnOffsetCommit makes OffsetFetch answer
	// UNSTABLE_OFFSET_COMMIT until the restarted instance fences it (docs/realkafka.md). The
	// committed outputs, read up to the last stable offset, say the same.
	require.Less(t, len(c.ReadAll(t, "out", true)), n, "killed mid-stream")
	p.Restart(t)
	require.NoError(t, waitCommittedWithin(c, time.Minute, "g", "in", hwm)) // fence, rejoin, up to 300 inputs
	p.Kill(t)
	requireOneOutputPerInput(t, c, n)
	for _, e := range p.Events() {
		require.NotEqual(t, kfaketest.EventNote, e.Kind, "%+v", e)
	}
}

// runTxnCrashChild runs a Transactional read-process-write App with a fixed transactional id.
func runTxnCrashChild(t *testing.T, env kfaketest.ChildEnv) {
	app := runtime.New(
		runtime.Brokers(env.Brokers...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.InstanceID(env.InstanceID),
		runtime.Logger(testLogger()),
		runtime.MaxPollRecords(10),
	)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-crash")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			time.Sleep(2 * time.Millisecond) // work, so the kill lands mid-stream
			if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(d.Record().Value))}); err != nil {
				return err
			}
			return nil
		}), runtime.Workers(2), runtime.MaxInFlightPerPartition(10)) // small windows: many transactions
	err := app.Run(context.Background())
	env.Log.Note("run-returned", fmt.Sprint(err))
	t.Fatalf("child run %d: Run returned: %v", env.Run, err)
}
