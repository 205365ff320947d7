package conformance

import (
	"context"
	"errors"
	"strconv"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

// retryScenarios are DESIGN §3.3: retry copies, their headers and addresses, attempts, dead letters.
func retryScenarios() []scenario {
	return []scenario{
		{name: "§3.3 MaxAttempts(3) with DeadLetter: attempts 1, 2, 3, then one dead-letter record", run: maxAttemptsThenDeadLetter},
		{name: "§3.3 MaxAttempts without DeadLetter drops the spent record", run: spentWithoutDeadLetter},
		{name: "§3.3 RetryToSource keeps topic and partition, keyless records included", run: retryToSourceKeepsPartition},
		{name: "§3.3 RetryTo sends copies to a retry topic the subscription consumes", run: retryToTopic},
		{name: "§3.3 a copy made by another group is settled without its handler", run: foreignCopySettled},
		{name: "§3.3 a parked copy holds the committed position until it is handled", run: parkedCopyHoldsPosition},
		{name: "§3.3 missing retry and dead-letter topics fail Start, naming them", run: missingTopicsFailStart},
		{name: "§3.3 a multi-topic subscription without a retry address fails Start", run: multiTopicNeedsRetryAddress},
		{name: "§3.3 a failed dead-letter produce keeps the record in flight", needs: "an injected produce fault", run: failedDeadLetterStaysInFlight},
	}
}

// MaxAttempts(3) + DeadLetter under Tracked: the handler sees attempts 1, 2, 3 (retry counts none,
// "1", "2"), key, value and user headers kept once; the third failure produces exactly one
// dead-letter record naming the original; the position passes the original and both copies.
func maxAttemptsThenDeadLetter(e *env) {
	in, dlq, g := e.topic("in", 1), e.topic("in.dlq", 1), e.name("g")
	orig := e.c.Produce(e, &kgo.Record{Topic: in, Key: []byte("k1"), Value: []byte("v1"),
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}}})[0]
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			return errors.New("bank down")
		}), runtime.MaxAttempts(3), runtime.DeadLetter(dlq), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3})
	e.stop(app)
	cs := got.all()
	require.Equal(e, []int{1, 2, 3}, got.attempts())
	require.Equal(e, [][]string{nil, {"1"}, {"2"}},
		[][]string{hv(cs[0].rec, "x-tidemark-retry-count"), hv(cs[1].rec, "x-tidemark-retry-count"), hv(cs[2].rec, "x-tidemark-retry-count")})
	for _, x := range cs {
		require.Equal(e, "k1", string(x.rec.Key))
		require.Equal(e, "v1", string(x.rec.Value))
		require.Equal(e, []string{"t-1"}, hv(x.rec, "trace"), "user headers kept once")
	}
	for _, x := range cs[1:] {
		require.Equal(e, []string{"0"}, hv(x.rec, "x-tidemark-origin-offset"), "the origin is kept on later copies")
		require.Equal(e, []string{g}, hv(x.rec, "x-tidemark-retry-group"))
	}
	dead := e.c.ReadAll(e, dlq, true)
	require.Len(e, dead, 1)
	requireDeadLetter(e, dead[0], "v1", in, 0, 0, g, "bank down", 3)
	require.Equal(e, "k1", string(dead[0].Key))
	require.Equal(e, []string{strconv.FormatInt(orig.Timestamp.UnixMilli(), 10)}, hv(dead[0], "x-tidemark-dlq-timestamp"))
	require.Equal(e, []string{"t-1"}, hv(dead[0], "trace"))
}

// MaxAttempts(2) without a dead-letter topic: the original and one copy on the source topic, then
// the record is dropped as spent (OutcomeSpent, at the copy's offset).
func spentWithoutDeadLetter(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "x")
	var got calls
	obs := &observer{}
	app := e.app(runtime.Observe(obs))
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			return errors.New("no")
		}), runtime.MaxAttempts(2), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 2})
	e.stop(app)
	require.Equal(e, []int{1, 2}, got.attempts())
	require.Equal(e, []string{"x", "x"}, recValues(e.c.ReadAll(e, in, true)), "the original and one copy")
	spent := obs.outcomes(runtime.OutcomeSpent)
	require.Len(e, spent, 1)
	require.Equal(e, int64(1), spent[0].Offset)
}

// RetryToSource on a two-topic subscription: each copy goes to the topic and partition of its
// record, keyless records included.
func retryToSourceKeepsPartition(e *env) {
	a, b, g := e.topic("a", 3), e.topic("b", 2), e.name("g")
	e.values(a, 2, "a2")
	e.values(b, 1, "b1")
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topics(a, b).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return errors.New("once")
			}
			return nil
		}), runtime.MaxAttempts(2), runtime.RetryToSource(), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, a, map[int32]int64{2: 2})
	e.c.WaitCommitted(e, g, b, map[int32]int64{1: 2})
	e.stop(app)
	require.Equal(e, map[int32]int64{0: 0, 1: 0, 2: 2}, e.c.HighWatermarks(e, a))
	require.Equal(e, map[int32]int64{0: 0, 1: 2}, e.c.HighWatermarks(e, b))
	require.Equal(e, 4, got.len())
}

// RetryTo(topic): the copy goes to the retry topic, carries the origin, and the same subscription
// (same group, handler, mode) consumes it.
func retryToTopic(e *env) {
	in, rt, g := e.topic("in", 1), e.topic("in.retry", 1), e.name("g")
	e.c.Produce(e, &kgo.Record{Topic: in, Key: []byte("k"), Value: []byte("v")})
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return errors.New("once")
			}
			return nil
		}), runtime.MaxAttempts(3), runtime.RetryTo(rt), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1})
	e.c.WaitCommitted(e, g, rt, map[int32]int64{0: 1})
	e.stop(app)
	cs := got.all()
	require.Equal(e, []int{1, 2}, got.attempts())
	require.Equal(e, rt, cs[1].rec.Topic)
	require.Equal(e, "k", string(cs[1].rec.Key))
	require.Equal(e, []string{in}, hv(cs[1].rec, "x-tidemark-origin-topic"))
	require.Equal(e, map[int32]int64{0: 1}, e.c.HighWatermarks(e, in), "nothing was copied to the source")
}

// A copy made by group A is settled by group B without calling B's handler; B handles the original
// once.
func foreignCopySettled(e *env) {
	in, ga, gb := e.topic("in", 1), e.name("A"), e.name("B")
	e.values(in, 0, "r")
	var a, b calls
	obs := &observer{}
	appA := e.app()
	runtime.Handle(appA, runtime.Topic(in).Group(ga).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			a.add(d)
			if d.Attempt() == 1 {
				return errors.New("retry me")
			}
			return nil
		}), runtime.MaxAttempts(2), fastBackoff)
	appB := e.app(runtime.Observe(obs))
	runtime.Handle(appB, runtime.Topic(in).Group(gb).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error { b.add(d); return nil }))
	e.start(appA)
	e.start(appB)
	e.c.WaitCommitted(e, ga, in, map[int32]int64{0: 2})
	e.c.WaitCommitted(e, gb, in, map[int32]int64{0: 2})
	e.stop(appB)
	require.Equal(e, []string{"r@1"}, b.tagged())
	require.Equal(e, int64(0), b.all()[0].rec.Offset)
	require.Equal(e, []string{"r@1", "r@2"}, a.tagged())
	foreign := obs.outcomes(runtime.OutcomeForeignCopy)
	require.Len(e, foreign, 1)
	require.Equal(e, int64(1), foreign[0].Offset)
}

// RetryAfter(700ms): the copy (offset 1) is in Kafka before the original completes; it is parked
// until due and the committed position stays at it, while it waits and while it runs; it is
// handled no earlier than its not-before time, then the position moves past it.
func parkedCopyHoldsPosition(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "pay")
	release := newGate()
	running := make(chan struct{})
	var got calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return runtime.RetryAfter(700*time.Millisecond, errors.New("bank busy"))
			}
			close(running)
			if !release.wait(ctx) {
				return ctx.Err()
			}
			return nil
		}))
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1})
	require.Equal(e, map[int32]int64{0: 2}, e.c.HighWatermarks(e, in), "the copy was produced before the original completed")
	e.waitClosed(running, "the copy was never handled")
	require.Equal(e, map[int32]int64{0: 1}, e.c.Committed(e, g, in), "the position waits for the running copy")
	e.requireCommitsAtMost(g, in, 0, 1)
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 2})
	cs := got.all()
	require.Equal(e, []int{1, 2}, got.attempts())
	nb, err := strconv.ParseInt(hv(cs[1].rec, "x-tidemark-not-before")[0], 10, 64)
	require.NoError(e, err)
	require.False(e, cs[1].at.Before(time.UnixMilli(nb)), "handled before its not-before time")
}

// Retry and dead-letter topics are checked at Start: a missing one is an error naming the option
// and the topic.
func missingTopicsFailStart(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	app := e.app()
	nope, nopeDLQ := e.name("nope.retry"), e.name("nope.dlq")
	runtime.Handle(app, runtime.Topic(in).Group(g), runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil }),
		runtime.DeadLetter(nopeDLQ), runtime.RetryTo(nope))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := app.Start(ctx)
	require.ErrorContains(e, err, `RetryTo: topic "`+nope+`" does not exist`)
	require.ErrorContains(e, err, `DeadLetter: topic "`+nopeDLQ+`" does not exist`)
	var ce *runtime.ConfigError
	require.ErrorAs(e, err, &ce)
}

// A multi-topic subscription must name a retry address, even if its handler never retries.
func multiTopicNeedsRetryAddress(e *env) {
	app := e.app()
	runtime.Handle(app, runtime.Topics(e.name("a"), e.name("b")).Group(e.name("g")),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil }))
	err := app.Start(context.Background())
	var ce *runtime.ConfigError
	require.ErrorAs(e, err, &ce)
	require.ErrorContains(e, err, "RetryTo")
}

// A dead-letter record that fails to produce is never silent: the original stays in flight and is
// handled again in place; exactly one dead-letter record lands.
func failedDeadLetterStaysInFlight(e *env) {
	in, dlq, g := e.topic("in", 1), e.topic("dlq", 1), e.name("g")
	e.values(in, 0, "bad")
	fault := e.c.FailProduce(dlq, 1, kerr.InvalidRecord)
	var got calls
	obs := &observer{}
	app := e.app(runtime.Observe(obs))
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			return runtime.Drop(errors.New("poison"))
		}), runtime.DeadLetter(dlq), fastBackoff)
	e.start(app)
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1})
	e.stop(app)
	require.Equal(e, 1, fault.Hits())
	require.Equal(e, []int{1, 2}, got.attempts())
	require.Len(e, e.c.ReadAll(e, dlq, true), 1)
	retried := obs.outcomes(runtime.OutcomeRetry)
	require.Len(e, retried, 1)
	require.ErrorIs(e, retried[0].Err, kerr.InvalidRecord)
	e.requireCommitsAtMost(g, in, 0, 1)
}
