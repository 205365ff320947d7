package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/dlq"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// produceInputs writes n records over parts partitions of "in", values "0".."n-1", and returns the
// input high watermarks.
func produceInputs(t *testing.T, c *kfaketest.Cluster, n int, parts int32) map[int32]int64 {
	t.Helper()
	for i := range n {
		c.ProduceValues(t, "in", int32(i)%parts, fmt.Sprint(i))
	}
	return c.HighWatermarks(t, "in")
}

// requireOneOutputPerInput reads "out" under read_committed and checks it holds exactly one
// output per input value 0..n-1.
func requireOneOutputPerInput(t *testing.T, c *kfaketest.Cluster, n int) {
	t.Helper()
	outs := c.ReadAll(t, "out", true)
	var got []string
	for _, r := range outs {
		got = append(got, string(r.Value))
	}
	sort.Strings(got)
	var want []string
	for i := range n {
		want = append(want, "out-"+fmt.Sprint(i))
	}
	sort.Strings(want)
	require.Equal(t, want, got, "exactly one output per input under read_committed")
}

// transform is the read-process-write handler: one output per input, through the handler's ctx.
func transform(app **runtime.App, hook func(ctx context.Context, d *runtime.Delivery) error) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		if hook != nil {
			if err := hook(ctx, d); err != nil {
				return err
			}
		}
		return (*app).Publish(ctx, &kgo.Record{Topic: "out", Key: d.Record().Key, Value: []byte("out-" + string(d.Record().Value))})
	})
}

func txnApp(c *kfaketest.Cluster, id string, h func(*runtime.App) runtime.Handler, opts ...runtime.HandleOption) *runtime.App {
	return txnAppWith(c, nil, id, h, opts...)
}

func txnAppWith(c *kfaketest.Cluster, appExtra []runtime.Option, id string, h func(*runtime.App) runtime.Handler, opts ...runtime.HandleOption) *runtime.App {
	app := runtime.New(appOpts(c, appExtra...)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional(id)), h(app), opts...)
	return app
}

// Read → transform → write: exactly one output per input under read_committed, and the committed
// offsets equal the input high watermarks (DESIGN §3.4).
func TestTransactionalReadProcessWrite(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 3), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 100, 3)
	var app *runtime.App
	app = txnApp(c, "tx-1", func(a *runtime.App) runtime.Handler { return transform(&app, nil) }, runtime.Workers(4))
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	requireOneOutputPerInput(t, c, 100)
	for _, cm := range c.CommitLog().Of("g", "in", 0) {
		require.True(t, cm.Txn, "offsets are committed inside transactions: %+v", cm)
	}
}

// A retry with no policy aborts the window: a read_committed reader never sees its outputs, and at
// the end every input has exactly one output (DESIGN §3.4).
func TestTransactionalRetryAbortsTheWindow(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 3), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 30, 3)
	var failed atomic.Bool
	var app *runtime.App
	app = txnApp(c, "tx-2", func(a *runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "5" && failed.CompareAndSwap(false, true) {
				return errors.New("once")
			}
			return nil
		})
	}, fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	require.True(t, failed.Load())
	requireOneOutputPerInput(t, c, 30)
	// Outputs of the aborted window exist uncommitted: read_uncommitted sees more than 30.
	require.Greater(t, len(c.ReadAll(t, "out", false)), 30, "the aborted window had produced outputs")
}

// A failed produce aborts the window; it is read again and every input ends with exactly one
// output (DESIGN §3.4).
func TestTransactionalFailedProduceAborts(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 20, 2)
	fault := c.FailProduce("out", 1, kerr.InvalidRecord)
	var app *runtime.App
	app = txnApp(c, "tx-3", func(a *runtime.App) runtime.Handler { return transform(&app, nil) },
		fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	require.Equal(t, 1, fault.Hits())
	requireOneOutputPerInput(t, c, 20)
}

// Handlers that only ack still commit: the committed offsets reach the high watermarks, markers
// included (DESIGN §3.4, §3.7a).
func TestTransactionalAckOnlyCommits(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	hwm := produceInputs(t, c, 10, 2)
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-4")), ack)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
}

// A second live instance with the same transactional id fences the first: its Run returns
// ErrFenced; the second takes over, and every input has exactly one output (DESIGN §3.4).
//
// The first is fenced only once the second has committed a transaction of its own. kfake takes a
// v5 EndTxn whose epoch is one below the current one, from a producer not in a transaction, as a
// retry of the last EndTxn (KIP-890): a first instance that ended a transaction right after the
// second's InitProducerID would get success, or INVALID_TXN_STATE, instead of PRODUCER_FENCED.
// A real broker fences it (docs/realkafka.md, "Differences between kfake and Kafka").
func TestTransactionalFencing(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 20, 2)
	var first, second *runtime.App
	first = txnApp(c, "tx-same", func(a *runtime.App) runtime.Handler { return transform(&first, nil) })
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	errc := make(chan error, 1)
	go func() { errc <- first.Run(ctx) }()
	c.WaitCommitted(t, "g", "in", hwm)

	// The second instance takes the id and one partition, and commits a record of it.
	assigned := make(chan int32, 1)
	obs := &observer{onRebal: func(e runtime.RebalancedEvent) {
		if ps := partitionsOf(e, "in"); e.Kind == "assigned" && len(ps) > 0 {
			select {
			case assigned <- ps[0]: // the first assignment; the next (the first's partition) is not needed
			default:
			}
		}
	}}
	second = txnAppWith(c, []runtime.Option{runtime.Observe(obs)}, "tx-same",
		func(a *runtime.App) runtime.Handler { return transform(&second, nil) })
	start(t, second)
	var px int32
	select {
	case px = <-assigned:
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("the second instance was never assigned a partition")
	}
	c.ProduceValues(t, "in", px, "20")
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	require.NoError(t, ctx.Err())
	select {
	case err := <-errc:
		t.Fatalf("the first instance stopped before its next transaction: %v", err)
	default:
	}

	// The first's next transaction is fenced; the second takes its partition over.
	c.ProduceValues(t, "in", 1-px, "21")
	var err error
	select {
	case err = <-errc:
	case <-time.After(20 * time.Second):
		t.Fatal("the first instance was never fenced")
	}
	require.ErrorIs(t, err, runtime.ErrFenced)
	require.ErrorIs(t, err, kerr.ProducerFenced)
	require.NotContains(t, err.Error(), "did not end", "the newer producer aborted the fenced transaction (helper-105)")
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	stop(t, second)
	requireOneOutputPerInput(t, c, 22)
}

// MaxAttempts(2) + DeadLetter on a record that always fails: exactly one dead-letter record under
// read_committed, and the stream moves on (DESIGN §3.4).
func TestTransactionalDeadLetter(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
	produceInputs(t, c, 5, 1)
	var app *runtime.App
	app = txnApp(c, "tx-5", func(a *runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "2" {
				return errors.New("always")
			}
			return nil
		})
	}, runtime.MaxAttempts(2), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "dlq", true)) == 1 }, kfaketest.WaitTimeout, 10*time.Millisecond)
	// 5 inputs, the retry copy of "2" and the markers of the transactions that wrote copies
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	stop(t, app)
	dead := c.ReadAll(t, "dlq", true)
	require.Len(t, dead, 1)
	require.Equal(t, "2", string(dead[0].Value))
	outs := c.ReadAll(t, "out", true)
	require.Len(t, outs, 4)
}

// A handler still running when its window aborts (it outlives WindowTimeout) cannot publish into
// the next transaction: its publish is refused, and the output holds exactly one record per input
// (DESIGN §3.4).
func TestTransactionalLateHandlerIsRefused(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 3, 1)
	var stuck atomic.Bool
	lateErr := make(chan error, 1)
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-6")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "1" && stuck.CompareAndSwap(false, true) {
				<-ctx.Done() // the window timed out and aborted
				lateErr <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("late")})
				return nil
			}
			return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(d.Record().Value))})
		}), runtime.Workers(2), runtime.Unordered, runtime.WindowTimeout(2*time.Second), // it bounds End too: not tighter under load
		fastBackoff)
	start(t, app)
	select {
	case err := <-lateErr:
		require.ErrorIs(t, err, runtime.ErrWindowClosed)
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("the stuck handler's ctx never ended")
	}
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	requireOneOutputPerInput(t, c, 3)
}

// A handler that publishes the same *kgo.Record on every attempt: after the first attempt's window
// aborts, the record does not keep that window's cancelled ctx (franz-go's r.Context), so the next
// attempt's publish, in the next window, goes through and commits, once (DESIGN §3.4).
func TestTransactionalPublishTheSameRecordAfterAnAbort(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 1, 1)
	out := &kgo.Record{Topic: "out", Value: []byte("out-0")}
	var attempts atomic.Int32
	var app *runtime.App
	app = txnApp(c, "tx-reuse", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			attempts.Add(1)
			if err := app.Publish(ctx, out); err != nil {
				return err
			}
			if d.Attempt() == 1 {
				return errors.New("after publishing: the window aborts")
			}
			return nil
		})
	}, fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	require.Equal(t, int32(2), attempts.Load())
	require.Nil(t, out.Context)
	requireOneOutputPerInput(t, c, 1)
}

// Manual partitions cannot be Transactional (DESIGN §3.10).
func TestTransactionalManualPartitionsFailStart(t *testing.T) {
	app := runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.Logger(testLogger()))
	runtime.Handle(app, runtime.Partitions("in", 0).Group("m").Commit(runtime.Transactional("x")), ack, runtime.RetryToSource())
	var ce *runtime.ConfigError
	require.ErrorAs(t, app.Start(context.Background()), &ce)
	require.Equal(t, `Partitions("in", [0]).Commit`, ce.Option)
}

// A second member joining mid-stream rebalances the group; the windows it cuts short abort, and
// every input still has exactly one output across both members (DESIGN §3.4).
func TestTransactionalMemberJoinsMidStream(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 4), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 1000, 4)
	slow := func(ctx context.Context, d *runtime.Delivery) error {
		time.Sleep(time.Millisecond) // work, so the join lands mid-stream
		return nil
	}
	var a, b *runtime.App
	// Small polls and back-pressure keep each 100 ms window to a few dozen records: many windows.
	small := []runtime.Option{runtime.MaxPollRecords(10)}
	a = txnAppWith(c, small, "tx-a", func(*runtime.App) runtime.Handler { return transform(&a, slow) }, runtime.MaxInFlightPerPartition(10))
	start(t, a)
	c.CommitLog().Wait(t, func(cs []kfaketest.Commit) bool { return len(cs) > 0 })
	b = txnAppWith(c, small, "tx-b", func(*runtime.App) runtime.Handler { return transform(&b, slow) }, runtime.MaxInFlightPerPartition(10))
	start(t, b)
	require.NoError(t, waitCommittedWithin(c, time.Minute, "g", "in", hwm)) // 1,000 inputs in 100 ms windows
	stop(t, a)
	stop(t, b)
	requireOneOutputPerInput(t, c, 1000)
	members := map[string]bool{}
	for _, cm := range c.CommitLog().All() {
		members[cm.TxnID] = true
	}
	require.Equal(t, map[string]bool{"tx-a": true, "tx-b": true}, members, "both members committed")
}

// RetryAfter in the Transactional mode: the copy is produced inside the window and its partition
// waits until it is due; nothing is parked across windows (DESIGN §3.4).
func TestTransactionalRetryAfter(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	produceInputs(t, c, 5, 1)
	var handledAt sync.Map
	var app *runtime.App
	app = txnApp(c, "tx-7", func(*runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			handledAt.Store(fmt.Sprint(string(d.Record().Value), "#", d.Attempt()), time.Now())
			if string(d.Record().Value) == "3" && d.Attempt() == 1 {
				return runtime.RetryAfter(300*time.Millisecond, errors.New("later"))
			}
			return nil
		})
	})
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "out", true)) == 5 }, kfaketest.WaitTimeout, 10*time.Millisecond)
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	stop(t, app)
	requireOneOutputPerInput(t, c, 5)
	first, ok1 := handledAt.Load("3#1")
	second, ok2 := handledAt.Load("3#2")
	require.True(t, ok1 && ok2)
	require.GreaterOrEqual(t, second.(time.Time).Sub(first.(time.Time)), 300*time.Millisecond-5*time.Millisecond)
}

// A record with no topic published into a window goes to the session's kgo.DefaultProduceTopic,
// set in the subscription's Config, also when the App's ProducerOpts set another (helper-117:
// Publish looked only at the App's options and refused it with ErrInvalidRecord, spending the
// record; helper-119: ProducerOpts came after Config, and its default topic took the records).
func TestTransactionalPublishUsesTheSessionsDefaultTopic(t *testing.T) {
	for _, appDefault := range []bool{false, true} {
		t.Run(fmt.Sprintf("app default %v", appDefault), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("app-default", 1))
			hwm := produceInputs(t, c, 3, 1)
			var extra []runtime.Option
			if appDefault {
				extra = append(extra, runtime.ProducerOpts(kgo.DefaultProduceTopic("app-default")))
			}
			app := runtime.New(appOpts(c, extra...)...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-default")).Config(kgo.DefaultProduceTopic("out")),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					return app.Publish(ctx, &kgo.Record{Value: []byte("out-" + string(d.Record().Value))})
				}))
			start(t, app)
			c.WaitCommitted(t, "g", "in", hwm)
			stop(t, app)
			requireOneOutputPerInput(t, c, 3)
			require.Empty(t, c.ReadAll(t, "app-default", true))
		})
	}
}

// A RetryAfter(d) from a delivery that published aborts the window instead of making a copy, and
// its partition waits d all the same before the record is read again; the other partitions go on
// (helper-113: it was read again after the abort's 100 ms backoff).
func TestTransactionalRetryAfterThatPublishedWaitsItsDelay(t *testing.T) {
	const delay = 2 * time.Second
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 4, 2) // 0 and 2 on partition 0, 1 and 3 on partition 1
	var handledAt sync.Map
	var app *runtime.App
	app = txnApp(c, "tx-delay", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			v := string(d.Record().Value)
			handledAt.Store(fmt.Sprint(v, "#", d.Attempt()), time.Now())
			if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + v)}); err != nil {
				return err
			}
			if v == "0" && d.Attempt() == 1 {
				return runtime.RetryAfter(delay, errors.New("rate limited"))
			}
			return nil
		})
	})
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	requireOneOutputPerInput(t, c, 4)
	at := func(key string) time.Time {
		v, ok := handledAt.Load(key)
		require.True(t, ok, key)
		return v.(time.Time)
	}
	retried := at("0#2")
	require.GreaterOrEqual(t, retried.Sub(at("0#1")), delay-5*time.Millisecond, "the delay RetryAfter asked for")
	for _, v := range []string{"1", "3"} { // partition 1 is read again after the abort, not held for d
		require.True(t, at(v+"#1").Before(retried), "%s was last handled after the delayed record", v) // its attempt stays 1
	}
}

// In the Transactional mode a failed delivery that published, or a retry with no policy, aborts its
// window: none of its outputs commit, its next delivery's Attempt grows across the aborts, and
// MaxAttempts applies; windows shrink after aborts so records that fail now and then never stall
// the subscription (DESIGN §3.4).
func TestTransactionalRetriesCountAcrossAbortsAndOnlySuccessesCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
	produceInputs(t, c, 200, 2)
	var mu sync.Mutex
	attempts := map[string][]int{}
	var app *runtime.App
	app = txnApp(c, "tx-8", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			v := string(d.Record().Value)
			mu.Lock()
			attempts[v] = append(attempts[v], d.Attempt())
			mu.Unlock()
			// publish first, then fail: a failed attempt's output must never commit
			if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte(fmt.Sprintf("out-%s#%d", v, d.Attempt()))}); err != nil {
				return err
			}
			switch {
			case v == "7": // always fails: spent after 3 attempts, to the dead-letter topic
				return errors.New("always")
			case len(v) > 1 && v[len(v)-1] == '3' && d.Attempt() < 2: // 13, 23, ... fail once
				return errors.New("once")
			}
			return nil
		})
	}, runtime.MaxAttempts(3), runtime.DeadLetter("dlq"), runtime.Workers(4),
		runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "dlq", true)) == 1 }, kfaketest.WaitTimeout, 20*time.Millisecond)
	// Dozens of small windows, each aborted one read again: a minute under -race on a small machine.
	require.NoError(t, waitCommittedWithin(c, time.Minute, "g", "in", c.HighWatermarks(t, "in")))
	stop(t, app)
	outs := map[string]int{}
	for _, r := range c.ReadAll(t, "out", true) {
		outs[string(r.Value)]++
	}
	for i := range 200 {
		v := fmt.Sprint(i)
		switch {
		case v == "7":
			for a := 1; a <= 3; a++ {
				require.Zero(t, outs[fmt.Sprintf("out-7#%d", a)], "a failed attempt's output committed")
			}
		case len(v) > 1 && v[len(v)-1] == '3':
			require.Equal(t, 1, outs["out-"+v+"#2"], v)
			require.Zero(t, outs["out-"+v+"#1"], v)
		default:
			require.Equal(t, 1, outs["out-"+v+"#1"], v)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, dedupe(attempts["7"]), "attempts of 7 grow across aborted windows")
	dead := c.ReadAll(t, "dlq", true)
	require.Equal(t, "7", string(dead[0].Value))
	require.Equal(t, []string{"3"}, hv(dead[0], dlq.AttemptsHeader), "the deliveries it had")
	require.Equal(t, []string{"3"}, hv(dead[0], retry.CountHeader))
	require.Equal(t, []string{"always"}, hv(dead[0], dlq.ErrorHeader), "the failure of the attempt that spent it")
}

// dedupe drops repeats of an attempt number (a record read again in an aborted window for another
// record's sake is handled again with the same attempt).
func dedupe(as []int) []int {
	var out []int
	for _, a := range as {
		if len(out) == 0 || out[len(out)-1] != a {
			out = append(out, a)
		}
	}
	return out
}

// A retry with no policy aborts the window once; the record's next delivery is attempt 2, and the
// stream moves on.
func TestTransactionalPlainRetrySettlesOnTheNextAttempt(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 3, 1)
	var mu sync.Mutex
	var seenAttempts []int
	var app *runtime.App
	app = txnApp(c, "tx-9", func(*runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 1 {
				mu.Lock()
				seenAttempts = append(seenAttempts, d.Attempt())
				mu.Unlock()
				if d.Attempt() == 1 {
					return runtime.Retry(errors.New("once"))
				}
			}
			return nil
		})
	}, runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	requireOneOutputPerInput(t, c, 3)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, dedupe(seenAttempts))
}

// A batch's publishes are every element's attempt: when an element of a batch that published
// fails, the window aborts and only the successful attempt's outputs commit, as for a Handler; its
// attempts count across the aborts (DESIGN §3.4, §3.5).
func TestTransactionalBatchThatPublishedThenFailedCommitsNoOutputOfTheFailure(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 10, 1)
	var mu sync.Mutex
	var attempts []int // of "5"
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-batch")), 4,
		runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
			errs := make([]error, len(ds))
			for i, d := range ds {
				v := string(d.Record().Value)
				if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: fmt.Appendf(nil, "out-%s#%d", v, d.Attempt())}); err != nil {
					errs[i] = err
					continue
				}
				if v == "5" {
					mu.Lock()
					attempts = append(attempts, d.Attempt())
					mu.Unlock()
					if d.Attempt() == 1 {
						errs[i] = errors.New("once")
					}
				}
			}
			return errs
		}), runtime.MaxAttempts(3), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	got := committedValues(t, c, "out")
	want := []string{"out-0#1", "out-1#1", "out-2#1", "out-3#1", "out-4#1", "out-5#2", "out-6#1", "out-7#1", "out-8#1", "out-9#1"}
	require.Equal(t, want, got, "one output per input, none of the failed attempt")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, dedupe(attempts))
}

// A handler whose own publish fails for good aborts its window every time, whether or not it
// returns the error: each such attempt counts, so MaxAttempts sends the record to the dead-letter
// topic and the records behind it go on (DESIGN §3.4). With DeadLetter alone, the first failure
// of a delivery that published goes there.
func TestTransactionalAttemptsWhosePublishFailsAreCounted(t *testing.T) {
	cases := []struct {
		name     string
		swallow  bool // the handler ignores its publish's error and returns nil
		opts     []runtime.HandleOption
		attempts []int
	}{
		{"returned, MaxAttempts", false, []runtime.HandleOption{runtime.MaxAttempts(3), runtime.DeadLetter("dlq")}, []int{1, 2, 3}},
		{"swallowed, MaxAttempts", true, []runtime.HandleOption{runtime.MaxAttempts(3), runtime.DeadLetter("dlq")}, []int{1, 2, 3}},
		{"returned, DeadLetter alone", false, []runtime.HandleOption{runtime.DeadLetter("dlq")}, []int{1}},
	}
	for i, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
			hwm := produceInputs(t, c, 3, 1) // "1" cannot publish its output
			var mu sync.Mutex
			var attempts []int
			var app *runtime.App
			app = txnApp(c, fmt.Sprintf("tx-pub-%d", i), func(*runtime.App) runtime.Handler {
				return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					v := string(d.Record().Value)
					out := &kgo.Record{Topic: "out", Value: []byte("out-" + v)}
					if v == "1" {
						mu.Lock()
						attempts = append(attempts, d.Attempt())
						mu.Unlock()
						out.Topic = "" // the produce fails: a record without a topic
					}
					if err := app.Publish(ctx, out); err != nil && !tc.swallow {
						return err
					}
					return nil
				})
			}, append(tc.opts, fastBackoff)...)
			start(t, app)
			c.WaitCommitted(t, "g", "in", hwm)
			stop(t, app)
			require.Equal(t, []string{"out-0", "out-2"}, committedValues(t, c, "out"))
			require.Equal(t, []string{"1"}, committedValues(t, c, "dlq"))
			dead := c.ReadAll(t, "dlq", true)
			want := []string{fmt.Sprint(tc.attempts[len(tc.attempts)-1])} // the deliveries it had
			require.Equal(t, want, hv(dead[0], dlq.AttemptsHeader))
			mu.Lock()
			defer mu.Unlock()
			require.Equal(t, tc.attempts, dedupe(attempts))
		})
	}
}

// Every failing element of a batch that published counts an attempt, not only the first one to
// abort the window: with MaxAttempts(2), "a" and "b" are each handled at attempts 1 and 2, then
// dead-lettered once; only "c"'s output commits.
func TestTransactionalBatchCountsEveryFailingElement(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	hwm := c.HighWatermarks(t, "in")
	var mu sync.Mutex
	attempts := map[string][]int{}
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-batch-all")), 3,
		runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
			errs := make([]error, len(ds))
			for i, d := range ds {
				v := string(d.Record().Value)
				mu.Lock()
				attempts[v] = append(attempts[v], d.Attempt())
				mu.Unlock()
				if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + v)}); err != nil {
					errs[i] = err
				} else if v != "c" {
					errs[i] = errors.New("always")
				}
			}
			return errs
		}), runtime.MaxAttempts(2), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	stop(t, app)
	require.Equal(t, []string{"out-c"}, committedValues(t, c, "out"))
	require.Equal(t, []string{"a", "b"}, committedValues(t, c, "dlq"))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2}, attempts["a"])
	require.Equal(t, []int{1, 2}, attempts["b"])
}

// A retry copy made after an attempt counted in an aborted window carries the deliveries so far as
// its retry count, so MaxAttempts still caps the attempts: "x" publishes and fails once (the window
// aborts), then fails without publishing (copies): attempts 1, 2, 3, then the dead-letter topic
// (DESIGN §3.3: MaxAttempts counts every delivery).
func TestTransactionalCopyAfterAnAbortKeepsTheCount(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
	c.ProduceValues(t, "in", 0, "x", "y")
	var mu sync.Mutex
	var attempts []int // of "x"
	var app *runtime.App
	app = txnApp(c, "tx-copy-count", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			v := string(d.Record().Value)
			if v != "x" {
				return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + v)})
			}
			mu.Lock()
			attempts = append(attempts, d.Attempt())
			first := len(attempts) == 1
			mu.Unlock()
			if first {
				if err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-x")}); err != nil {
					return err
				}
			}
			return errors.New("always")
		})
	}, runtime.MaxAttempts(3), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "dlq", true)) == 1 }, 20*time.Second, 20*time.Millisecond)
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	stop(t, app)
	require.Equal(t, []string{"out-y"}, committedValues(t, c, "out"))
	dead := c.ReadAll(t, "dlq", true)
	require.Equal(t, "x", string(dead[0].Value))
	require.Equal(t, []string{"3"}, hv(dead[0], dlq.AttemptsHeader))
	require.Equal(t, []string{"3"}, hv(dead[0], retry.CountHeader))
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 2, 3}, attempts)
}

// committedValues returns the values of topic's records under read_committed, sorted.
func committedValues(t *testing.T, c *kfaketest.Cluster, topic string) []string {
	t.Helper()
	var out []string
	for _, r := range c.ReadAll(t, topic, true) {
		out = append(out, string(r.Value))
	}
	sort.Strings(out)
	return out
}

// repollObserver closes repolled at the first Delivered event after armed is set.
type repollObserver struct {
	runtime.NopObserver
	armed    atomic.Bool
	once     sync.Once
	repolled chan struct{}
}

func (o *repollObserver) Delivered(runtime.DeliveredEvent) {
	if o.armed.Load() {
		o.once.Do(func() { close(o.repolled) })
	}
}

// A handler whose own publish failed aborts its window and may go on working: by the time it
// returns its error, the next window has polled the records again and queued them behind it. That
// late return aborts only its own window: the next window's queued records stay queued and are
// handled, so every input has exactly one output (before, they were dropped as the old window's,
// counted done, and their offsets committed without outputs).
func TestTransactionalLateReturnOfAnAbortedWindowKeepsTheNextWindowsRecords(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	hwm := produceInputs(t, c, 10, 1)
	fault := c.FailProduce("out", 1, kerr.InvalidRecord)
	obs := &repollObserver{repolled: make(chan struct{})}
	var app *runtime.App
	app = txnAppWith(c, []runtime.Option{runtime.Observe(obs)}, "tx-late", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(d.Record().Value))})
			if err != nil { // the window aborted: return only once the next one has polled again
				obs.armed.Store(true)
				select {
				case <-obs.repolled:
				case <-time.After(kfaketest.WaitTimeout):
				}
			}
			return err
		})
	}, runtime.Workers(1))
	start(t, app)
	c.WaitCommitted(t, "g", "in", hwm)
	require.Equal(t, 1, fault.Hits())
	requireOneOutputPerInput(t, c, 10)
}

// A retry copy whose produce fails aborts the window, and that failed delivery counts: the
// record's next delivery is attempt 2, as an in-place retry's would be under Tracked, so
// MaxAttempts caps the deliveries however their copies fared.
func TestTransactionalFailedCopyCountsTheAttempt(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
	c.ProduceValues(t, "in", 0, "x")
	fault := c.FailProduce("in", 1, kerr.InvalidRecord) // the first copy
	var s seen
	app := txnApp(c, "tx-copy", func(*runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			s.add(string(d.Record().Value), d.Attempt())
			return errors.New("always")
		})
	}, runtime.MaxAttempts(3), runtime.DeadLetter("dlq"),
		runtime.Backoff(func(int, error) time.Duration { return 5 * time.Millisecond }))
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "dlq", true)) == 1 }, 20*time.Second, 20*time.Millisecond)
	require.Equal(t, 1, fault.Hits())
	require.Equal(t, []int{1, 2, 3}, s.attempts())
	dead := c.ReadAll(t, "dlq", true)
	require.Equal(t, []string{"3"}, hv(dead[0], dlq.AttemptsHeader))
}

// A handler's ctx is the window's, valid for the call: once the window's transaction has committed,
// it is cancelled with ErrWindowClosed as its cause, and released (DESIGN §3.4). Each record runs
// in a window of its own here; before, every committed window's ctx stayed live under the App.
func TestTransactionalCommittedWindowsEndTheirHandlersCtx(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	var (
		mu   sync.Mutex
		ctxs []context.Context
	)
	var app *runtime.App
	app = txnApp(c, "tx-release", func(a *runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			ctxs = append(ctxs, ctx)
			return nil
		})
	}, runtime.CommitInterval(5*time.Millisecond))
	start(t, app)
	const n = 5
	for i := range n {
		c.ProduceValues(t, "in", 0, fmt.Sprint(i))
		c.WaitCommitted(t, "g", "in", map[int32]int64{0: int64(i + 1)})
	}
	eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, ctx := range ctxs {
			if ctx.Err() == nil {
				return false
			}
		}
		return len(ctxs) == n
	}, "every committed window's ctx ends")
	stop(t, app)
	requireOneOutputPerInput(t, c, n)
	for _, ctx := range ctxs {
		require.ErrorIs(t, context.Cause(ctx), runtime.ErrWindowClosed)
	}
}

// After an abort, the new delivery of a retry copy waits until its old delivery's handler has
// returned, as a ByPartition record does (docs/transactions.md): copies are handled out of order,
// each in a unit of its own, but one unit per offset, which the copy read again joins.
func TestTransactionalCopyReadAgainWaitsForItsAbortedDelivery(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	cp := retry.Copy(&kgo.Record{Topic: "in", Value: []byte("0")}, "g", 1, time.Now().Add(-time.Second)) // this group's, due
	cp.Topic = "in"                                                                                      // Copy leaves the topic to RetryTo's choice
	c.ProduceTo(t, 0, cp)
	c.ProduceValues(t, "in", 0, "1")
	obs := &observer{}
	var (
		copyCalls, running, overlap atomic.Int32
		failedOnce                  atomic.Bool
		copyStarted                 = make(chan struct{})
	)
	var app *runtime.App
	app = txnAppWith(c, []runtime.Option{runtime.Observe(obs)}, "tx-copy-wait", func(a *runtime.App) runtime.Handler {
		return transform(&app, func(ctx context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "1" {
				if failedOnce.CompareAndSwap(false, true) {
					select { // the copy's first delivery is in its handler
					case <-copyStarted:
					case <-time.After(kfaketest.WaitTimeout):
					}
					return runtime.Retry(errors.New("once")) // no policy: the window aborts
				}
				return nil
			}
			if running.Add(1) > 1 {
				overlap.Add(1)
			}
			defer running.Add(-1)
			if copyCalls.Add(1) > 1 {
				return nil
			}
			close(copyStarted)
			<-ctx.Done() // the window aborted; this handler goes on regardless, until the window is read again
			deadline := time.Now().Add(kfaketest.WaitTimeout)
			for obs.totalDelivered() < 3 && time.Now().Before(deadline) { // the copy was polled again
				time.Sleep(5 * time.Millisecond)
			}
			for range 60 { // 300 ms: a new delivery of the copy would start now, beside this one
				if overlap.Load() > 0 {
					break
				}
				time.Sleep(5 * time.Millisecond)
			}
			return ctx.Err()
		})
	}, runtime.Workers(2), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	require.Zero(t, overlap.Load(), "the copy's new delivery ran beside its aborted one")
	require.Equal(t, int32(2), copyCalls.Load(), "the copy: once in the aborted window, once in the committed one")
	require.GreaterOrEqual(t, obs.totalDelivered(), 4, "the window was read again")
	requireOneOutputPerInput(t, c, 2)
}

// QueueTimeout bounds a Transactional publish's wait for buffer space as it bounds any Publish's
// (DESIGN §3.9): with room for one record and that one held by the broker, a second publish fails
// with ErrQueueFull after QueueTimeout, and the window, which it failed, aborts and is read again.
// Before, it waited for the buffer, whatever QueueTimeout said.
func TestTransactionalPublishHonoursQueueTimeout(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	c.ProduceValues(t, "in", 0, "a")
	var (
		calls       atomic.Int32
		pendingHeld atomic.Int64
		results     = make(chan error, 2)
	)
	var app *runtime.App
	app = txnAppWith(c, []runtime.Option{runtime.QueueTimeout(100 * time.Millisecond), runtime.ProducerOpts(kgo.MaxBufferedRecords(1))},
		"tx-queue", func(a *runtime.App) runtime.Handler {
			return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
				if calls.Add(1) > 1 {
					return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("a-done")})
				}
				release := c.HoldProduce()
				var wg sync.WaitGroup
				for _, v := range []string{"p0", "p1"} {
					wg.Go(func() { results <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte(v)}) })
				}
				select { // the one with no room fails after QueueTimeout
				case err := <-results:
					results <- err
				case <-time.After(kfaketest.WaitTimeout):
				}
				pendingHeld.Store(app.Pending()) // the held one
				release()
				wg.Wait()
				return nil // the failed publish aborts the window all the same
			})
		}, runtime.WindowTimeout(time.Minute))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	stop(t, app)
	var full int
	for range 2 {
		// The held one returns nil once released, or ErrUnconfirmed with the abort's cause, the other's
		// ErrQueueFull, if the abort ended its ctx before the release (answerGrace).
		if err := <-results; errors.Is(err, runtime.ErrQueueFull) && !errors.Is(err, runtime.ErrUnconfirmed) {
			full++
		}
	}
	require.Equal(t, 1, full, "one of the two publishes found no room")
	require.Equal(t, int64(1), pendingHeld.Load(), "Pending counts the transaction's publish the broker holds")
	require.Zero(t, app.Pending())
	require.Equal(t, int32(2), calls.Load(), "the aborted window was read again")
	var got []string
	for _, r := range c.ReadAll(t, "out", true) {
		got = append(got, string(r.Value))
	}
	require.Equal(t, []string{"a-done"}, got, "only the second delivery's output commits")
}

// A Transactional publish returns once its ctx ends, as any Publish does, with ErrUnconfirmed: the
// window aborts, so the record, which the cluster writes once it answers, never commits; the window
// is read again and only the second delivery's output commits. Before, the publish waited for the
// cluster, past its ctx (helper-110).
func TestTransactionalPublishReturnsWhenItsCtxEnds(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	c.ProduceValues(t, "in", 0, "a")
	arrived := produceArrivals(c) // after the input's produce: the next one is the handler's
	var (
		calls  atomic.Int32
		result = make(chan error, 1)
	)
	var app *runtime.App
	app = txnApp(c, "tx-unconfirmed", func(a *runtime.App) runtime.Handler {
		return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if calls.Add(1) > 1 {
				return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("a-done")})
			}
			release := c.HoldProduce()
			defer release()
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			res := make(chan error, 1)
			go func() { res <- app.Publish(pctx, &kgo.Record{Topic: "out", Value: []byte("a-held")}) }()
			select {
			case <-arrived: // sent and held: franz-go no longer fails it for its ctx
				cancel()
			case <-time.After(kfaketest.WaitTimeout):
				result <- errors.New("the produce request never reached the cluster")
				return nil
			}
			select {
			case err := <-res:
				result <- err
			case <-time.After(kfaketest.WaitTimeout):
				result <- errors.New("the publish did not return after its ctx ended")
			}
			return nil // the failed publish aborts the window all the same
		})
	}, runtime.WindowTimeout(time.Minute))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	stop(t, app)
	err := <-result
	require.ErrorIs(t, err, runtime.ErrUnconfirmed)
	require.ErrorIs(t, err, context.Canceled)
	require.Equal(t, int32(2), calls.Load(), "the aborted window was read again")
	require.Equal(t, []string{"a-done"}, readValues(t, c, "out"), "only the second delivery's output commits")
	require.Len(t, c.ReadAll(t, "out", false), 2, "the held record was written, in the aborted transaction")
}

// startUnmanaged starts app (20 s bound) without start's cleanup: the test shuts it down itself and
// checks Shutdown's error, which a later Shutdown would return again.
func startUnmanaged(t *testing.T, app *runtime.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
}

// shutdownAsync starts app's Shutdown with a ctx of d; its result arrives on the returned channel.
func shutdownAsync(app *runtime.App, d time.Duration) <-chan error {
	done := make(chan error, 1)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		defer cancel()
		done <- app.Shutdown(ctx)
	}()
	return done
}

// awaitShutdown returns the result of a Shutdown started by shutdownAsync; the test fails if it
// has not arrived within kfaketest.WaitTimeout.
func awaitShutdown(t *testing.T, done <-chan error) error {
	t.Helper()
	return awaitValue(t, done, "Shutdown did not return")
}

// stuckAt returns a handler that acks every record but the one at offset off, which closes running
// and waits for its ctx to end, then returns ctx's error.
func stuckAt(off int64, running chan struct{}) runtime.Handler {
	return runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		if d.Record().Offset != off {
			return nil
		}
		close(running)
		<-ctx.Done()
		return ctx.Err()
	})
}

// startStuckTxn produces a, b, c to "in" (1 partition), starts a Transactional App of group "g" with
// id whose handler is stuck at offset 1 until its ctx ends (stuckAt), and returns once it is stuck.
func startStuckTxn(t *testing.T, c *kfaketest.Cluster, id string, opts ...runtime.HandleOption) *runtime.App {
	t.Helper()
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	running := make(chan struct{})
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional(id)), stuckAt(1, running), opts...)
	startUnmanaged(t, app)
	waitClosed(t, running, "offset 1 was never handled")
	return app
}

// Shutdown's ctx bounds the last window's barrier too (DESIGN §3.4: TryAbort if the drain did not
// finish), not only WindowTimeout: with a handler stuck until its ctx ends and WindowTimeout an
// hour away, Shutdown returns soon after its ctx ends, saying the last window aborted, nothing past
// the stuck record is committed, and the next App handles the aborted window's records again, once
// each.
func TestTxnShutdownBoundAbortsTheLastWindow(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app := startStuckTxn(t, c, "tx-bound", runtime.WindowTimeout(time.Hour))
	err := awaitShutdown(t, shutdownAsync(app, 200*time.Millisecond))
	require.ErrorIs(t, err, context.DeadlineExceeded, "the drain did not finish")
	require.ErrorContains(t, err, "the last window aborted")
	first := int64(0) // offset 0 may have committed in a window of its own
	if committed := c.Committed(t, "g", "in"); len(committed) > 0 {
		require.Equal(t, map[int32]int64{0: 1}, committed, "nothing past the stuck record")
		first = 1
	}

	var s seen
	next := runtime.New(appOpts(c)...)
	runtime.Handle(next, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-bound")),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			s.add(string(d.Record().Value), d.Attempt())
			return nil
		}))
	start(t, next)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	stop(t, next)
	require.Equal(t, []string{"a", "b", "c"}[first:], s.values(), "the aborted window's records, once each")
}

// Shutdown stops every subscription's poll loop before it waits for any (DESIGN §3.7: fetch
// nothing new): while a Transactional subscription's last window waits at its barrier for a stuck
// handler, another subscription reads nothing produced after Shutdown began. (Between the state
// change and the poll loops' cancellation there is no I/O; the record takes a produce and a fetch.)
func TestShutdownStopsEveryPollLoopBeforeWaiting(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in1", 1), kfaketest.Topic("in2", 1))
	c.ProduceValues(t, "in1", 0, "stuck")
	running := make(chan struct{})
	var s2 seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in1").Group("g1").Commit(runtime.Transactional("tx-stuck")),
		stuckAt(0, running), runtime.WindowTimeout(time.Hour))
	runtime.Handle(app, runtime.Topic("in2").Group("g2").Commit(runtime.Transactional("tx-other")), s2.handler())
	startUnmanaged(t, app)
	waitClosed(t, running, "in1's record was never handled")
	done := shutdownAsync(app, time.Second)
	eventually(t, func() bool { st, _ := app.State(); return st == runtime.StateShuttingDown }, "Shutdown did not begin")
	c.ProduceValues(t, "in2", 0, "late")
	require.ErrorContains(t, awaitShutdown(t, done), `Topic("in1"): the last window aborted`)
	require.Empty(t, s2.values(), "in2 read a record produced after Shutdown began")
	require.Empty(t, c.Committed(t, "g2", "in2"), "in2 committed nothing")
}

// A last window that aborts because its barrier did not finish within WindowTimeout (Shutdown's
// ctx still running) is reported by Shutdown too, and nothing of it is committed.
func TestTxnShutdownReportsALastWindowThatStalled(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app := startStuckTxn(t, c, "tx-stall", runtime.WindowTimeout(300*time.Millisecond), runtime.CommitInterval(time.Hour))
	err := awaitShutdown(t, shutdownAsync(app, 20*time.Second))
	require.ErrorContains(t, err, `Topic("in"): the last window aborted`)
	require.ErrorContains(t, err, "window timeout passed")
	require.Empty(t, c.Committed(t, "g", "in"), "the window aborted: nothing committed")
}

// A last window whose End fails (its offsets are refused) is reported by Shutdown, wrapping the
// broker's error, and nothing of it is committed.
func TestTxnShutdownReportsALastWindowWhoseEndFailed(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-end")), s.handler(),
		runtime.CommitInterval(time.Hour))
	startUnmanaged(t, app)
	eventually(t, func() bool { return len(s.values()) == 3 }, "the records were not handled: %v", s.values())
	c.FailCommit("g", -1, kerr.GroupAuthorizationFailed)
	err := awaitShutdown(t, shutdownAsync(app, 20*time.Second))
	require.ErrorContains(t, err, `Topic("in"): the last window's transaction did not end`)
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	require.Empty(t, c.Committed(t, "g", "in"), "nothing committed")
}

// A Transactional subscription whose transactions keep failing (here every offset commit is
// refused) fails the App once 5 failures in a row have gone on for the group's session timeout
// (kfaketest.SessionTimeout here): an outage the group itself would ride out, a broker restarting,
// is waited for. It used to fail after 5 failures whatever their span, about 2 s of outage with the
// default backoff, where Tracked rode out 10 s (helper-59, on a real broker).
func TestTxnRepeatedFailuresFailTheAppAfterTheSessionTimeout(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b")
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-fail")), s.handler(),
		runtime.Backoff(func(int, error) time.Duration { return 10 * time.Millisecond }))
	c.FailCommit("g", -1, kerr.GroupAuthorizationFailed)
	failing := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Run(ctx)
	require.ErrorContains(t, err, "transactions failed in a row")
	require.ErrorIs(t, err, kerr.GroupAuthorizationFailed)
	require.GreaterOrEqual(t, time.Since(failing), kfaketest.SessionTimeout, "failed before the session timeout")
	require.Empty(t, c.Committed(t, "g", "in"), "nothing committed")
}

// Under Transactional a handler's ctx is cancelled when its window aborts (here Shutdown's bound
// cut the last window's barrier), and what it returns then is reported as it is: a Drop is
// OutcomeDrop, not OutcomeRetry as under Auto and Tracked; with a DeadLetter, the aborted window
// refuses the dead-letter record, which makes it OutcomeRetry. Nothing is lost either way: the
// window aborted, nothing is committed, no dead letter is visible, and the next App handles the
// record again (docs/operations.md, OutcomeRetry; Drop's doc).
func TestTxnDropFromACancelledHandlerIsReadAgainWithItsWindow(t *testing.T) {
	for _, tc := range []struct {
		name    string
		opts    []runtime.HandleOption
		want    runtime.Outcome
		wantErr error
	}{
		{"no dead-letter topic", nil, runtime.OutcomeDrop, context.Canceled},
		{"a dead-letter topic", []runtime.HandleOption{runtime.DeadLetter("dlq")}, runtime.OutcomeRetry, runtime.ErrWindowClosed},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
			c.ProduceValues(t, "in", 0, "a")
			running := make(chan struct{})
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-drop")),
				runtime.HandlerFunc(func(ctx context.Context, _ *runtime.Delivery) error {
					close(running)
					<-ctx.Done()
					return runtime.Drop(ctx.Err())
				}), append(tc.opts, runtime.WindowTimeout(time.Hour))...)
			startUnmanaged(t, app)
			waitClosed(t, running, "offset 0 was never handled")
			err := awaitShutdown(t, shutdownAsync(app, 200*time.Millisecond))
			require.ErrorContains(t, err, "the last window aborted")
			require.Empty(t, c.Committed(t, "g", "in"))
			obs.mu.Lock()
			require.Len(t, obs.settled, 1)
			require.Equal(t, tc.want, obs.settled[0].Outcome)
			require.ErrorIs(t, obs.settled[0].Err, tc.wantErr)
			obs.mu.Unlock()

			var s seen
			next := runtime.New(appOpts(c)...)
			runtime.Handle(next, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-drop")), s.handler())
			start(t, next)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
			stop(t, next)
			require.Equal(t, []string{"a"}, s.values())
			require.Equal(t, []int{1}, s.attempts(), "a new App counts the attempts anew")
			require.Empty(t, c.ReadAll(t, "dlq", true), "no dead letter")
		})
	}
}
