package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// consumeAndAck registers an acking Tracked handler on "in", so the App can start.
func consumeAndAck(app *runtime.App) {
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), ack)
}

// Publish waits for the brokers' acknowledgement; key, value and headers round-trip byte for byte
// (DESIGN §3.9). A nil record, or one with no topic, wraps ErrInvalidRecord, and nothing is
// written for it.
func TestPublishRoundTripsKeyValueAndHeaders(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c)...)
	consumeAndAck(app)
	start(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	rec := &kgo.Record{Topic: "out", Key: []byte{0, 1, 0xFF}, Value: []byte("v\x00alue"),
		Headers: []kgo.RecordHeader{{Key: "h1", Value: []byte{0xFE}}, {Key: "h1", Value: nil}, {Key: "", Value: []byte("x")}}}
	require.NoError(t, app.Publish(ctx, rec))
	err := app.Publish(ctx, nil)
	require.ErrorIs(t, err, runtime.ErrInvalidRecord)
	require.EqualError(t, err, "tidemark: invalid record: nil")
	err = app.Publish(ctx, &kgo.Record{Value: []byte("no topic")})
	require.ErrorIs(t, err, runtime.ErrInvalidRecord, "helper-116: franz-go's own error matched no sentinel")
	require.EqualError(t, err, "tidemark: invalid record: no topic, and no kgo.DefaultProduceTopic in the producer's options")
	require.Zero(t, app.Pending())
	require.NoError(t, runtime.PublishJSON(ctx, app, "out", []byte("k"), map[string]int{"n": 1}))
	got := c.ReadAll(t, "out", true)
	require.Len(t, got, 2)
	require.Equal(t, rec.Key, got[0].Key)
	require.Equal(t, rec.Value, got[0].Value)
	require.Len(t, got[0].Headers, 3)
	for i, h := range rec.Headers {
		require.Equal(t, h.Key, got[0].Headers[i].Key)
		require.Equal(t, len(h.Value), len(got[0].Headers[i].Value))
		require.Equal(t, string(h.Value), string(got[0].Headers[i].Value))
	}
	require.Equal(t, []byte("k"), got[1].Key)
	require.Equal(t, `{"n":1}`, string(got[1].Value))
}

// A record with no topic goes to the kgo.DefaultProduceTopic of ProducerOpts.
func TestPublishWithNoTopicUsesTheDefaultTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.DefaultProduceTopic("out")))...)
	consumeAndAck(app)
	start(t, app)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Publish(ctx, &kgo.Record{Value: []byte("to the default")}))
	got := c.ReadAll(t, "out", true)
	require.Len(t, got, 1)
	require.Equal(t, "to the default", string(got[0].Value))
}

// QueueTimeout bounds the wait for buffer space: with the buffer full and the cluster holding
// produce requests, Publish fails with ErrQueueFull (DESIGN §3.9).
func TestPublishFailsWithErrQueueFullPastQueueTimeout(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.QueueTimeout(100*time.Millisecond),
		runtime.ProducerOpts(kgo.MaxBufferedRecords(2)))...)
	consumeAndAck(app)
	start(t, app)
	release := c.HoldProduce()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	// Three publishes, room for two: the two that get in are held by the cluster, so the third
	// waits QueueTimeout for space and gives up.
	var wg sync.WaitGroup
	errs := make(chan error, 3)
	for range 3 {
		wg.Go(func() { errs <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("v")}) })
	}
	require.ErrorIs(t, <-errs, runtime.ErrQueueFull)
	require.Equal(t, int64(2), app.Pending())
	release()
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	require.Len(t, c.ReadAll(t, "out", true), 2)
}

// A Publish returns once its ctx ends, whatever the brokers do (helper-110: with the cluster gone,
// a Publish with a 200 ms ctx waited 4.5 s, until Shutdown; a record behind another in a lingering
// batch returned nil 486 ms after its ctx ended). It says ErrUnconfirmed beside ctx's error: the
// record stays franz-go's, counted by Pending, and may be written all the same, as both records
// here are once the cluster answers.
func TestAPublishReturnsWhenItsCtxEndsBeforeTheBrokersAnswer(t *testing.T) {
	t.Run("the brokers hold it", func(t *testing.T) {
		c := kfaketest.New(t, kfaketest.Topic("out", 1))
		app := runtime.New(appOpts(c)...)
		t.Cleanup(func() { _ = app.Shutdown(context.Background()) })
		arrived := produceArrivals(c)
		release := c.HoldProduce()
		defer release()
		r := &kgo.Record{Topic: "out", Value: []byte("held")}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		res := publish(app, ctx, r)
		awaitValue(t, arrived, "the produce request never reached the cluster")
		cancel() // sent and held: franz-go no longer fails it for its ctx
		err := awaitValue(t, res, "Publish did not return after its ctx ended")
		require.ErrorIs(t, err, runtime.ErrUnconfirmed)
		require.ErrorIs(t, err, context.Canceled)
		require.EqualError(t, err, `tidemark: publish to "out": tidemark: publish not confirmed by the brokers: context canceled`)
		require.Equal(t, int64(1), app.Pending(), "franz-go still holds it")
		release()
		require.Eventually(t, func() bool { return app.Pending() == 0 }, kfaketest.WaitTimeout, time.Millisecond)
		require.Nil(t, r.Context, "cleared once franz-go was done with it")
		require.Equal(t, []string{"held"}, readValues(t, c, "out"), "unconfirmed, written all the same")
	})
	t.Run("it does not lead its batch", func(t *testing.T) {
		c := kfaketest.New(t, kfaketest.Topic("out", 1))
		app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.ProducerLinger(2*time.Second)))...)
		t.Cleanup(func() { _ = app.Shutdown(context.Background()) })
		first := publish(app, context.Background(), &kgo.Record{Topic: "out", Value: []byte("first")})
		require.Eventually(t, func() bool { return app.Pending() == 1 }, kfaketest.WaitTimeout, time.Millisecond)
		ctx, cancel := context.WithCancel(context.Background())
		second := publish(app, ctx, &kgo.Record{Topic: "out", Value: []byte("second")})
		require.Eventually(t, func() bool { return app.Pending() == 2 }, kfaketest.WaitTimeout, time.Millisecond)
		cancel() // the batch lingers: franz-go reads only its first record's ctx
		err := awaitValue(t, second, "Publish did not return after its ctx ended")
		require.ErrorIs(t, err, runtime.ErrUnconfirmed)
		require.ErrorIs(t, err, context.Canceled)
		require.NoError(t, awaitValue(t, first, "the first Publish did not return"))
		require.Eventually(t, func() bool { return app.Pending() == 0 }, kfaketest.WaitTimeout, time.Millisecond)
		require.Equal(t, []string{"first", "second"}, readValues(t, c, "out"), "franz-go sent it with its batch")
	})
	// helper-137: franz-go fails every record buffered for the partition, unsent, for its batch's
	// first record's ctx, and likewise those waiting with it for the producer's ID.
	t.Run("it leads its batch", func(t *testing.T) { publishLeadingABatch(t, true) })
	t.Run("it leads the producer's first request", func(t *testing.T) { publishLeadingABatch(t, false) })
}

// publish runs app.Publish(ctx, r) in a goroutine and brings its result.
func publish(app *runtime.App, ctx context.Context, r *kgo.Record) <-chan error {
	res := make(chan error, 1)
	go func() { res <- app.Publish(ctx, r) }()
	return res
}

// publishLeadingABatch publishes v0 with a ctx it cancels while v0 leads a lingering batch with
// v1 to v4 (published with context.Background) behind it, after a first record when warm: v0's
// Publish fails and v0 is not written; v1 to v4 are, each once (helper-137: they failed with v0's
// ctx error).
func publishLeadingABatch(t *testing.T, warm bool) {
	c := kfaketest.New(t, kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.ProducerLinger(1500*time.Millisecond)))...)
	t.Cleanup(func() { _ = app.Shutdown(context.Background()) })
	want := []string{"v1", "v2", "v3", "v4"}
	if warm { // the producer has its ID: the records wait in a lingering batch only
		require.NoError(t, app.Publish(context.Background(), &kgo.Record{Topic: "out", Value: []byte("w")}))
		want = append(want, "w")
	}
	ctx, cancel := context.WithCancel(context.Background())
	first := publish(app, ctx, &kgo.Record{Topic: "out", Value: []byte("v0")})
	require.Eventually(t, func() bool { return app.Pending() == 1 }, kfaketest.WaitTimeout, time.Millisecond)
	var rest []<-chan error
	for i := 1; i <= 4; i++ {
		rest = append(rest, publish(app, context.Background(), &kgo.Record{Topic: "out", Value: fmt.Appendf(nil, "v%d", i)}))
		require.Eventually(t, func() bool { return app.Pending() == int64(i+1) }, kfaketest.WaitTimeout, time.Millisecond)
	}
	cancel() // franz-go fails the lingering batch, all five unsent, when the linger ends
	err := awaitValue(t, first, "Publish did not return after its ctx ended")
	require.ErrorIs(t, err, context.Canceled)
	if warm { // failed when the linger ends, past the 100 ms Publish waits for an answer
		require.ErrorIs(t, err, runtime.ErrUnconfirmed)
	} // cold, franz-go fails it as its producer ID request ends: within those 100 ms or after
	for i, ch := range rest {
		require.NoError(t, awaitValue(t, ch, "a Publish behind it did not return"), "v%d", i+1)
	}
	require.Eventually(t, func() bool { return app.Pending() == 0 }, kfaketest.WaitTimeout, time.Millisecond)
	// produced again after the batch was failed, each by its own Publish, in no set order
	require.ElementsMatch(t, want, readValues(t, c, "out"), "each once; v0 not written")
}

// produceArrivals signals each Produce request that reaches c's kfake, before a HoldProduce made
// after it holds the request (kfake runs a key's controls in the order they were added).
func produceArrivals(c *kfaketest.Cluster) <-chan struct{} {
	arrived := make(chan struct{}, 100)
	c.Kfake().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		select {
		case arrived <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	return arrived
}

// awaitValue returns what ch brings, failing the test with msg if nothing comes within
// kfaketest.WaitTimeout.
func awaitValue[T any](t *testing.T, ch <-chan T, msg string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal(msg)
		var zero T
		return zero
	}
}

// Shutdown flushes within FlushTimeout; what the brokers did not confirm is counted and reported
// with ErrUnflushed, and publishes after Shutdown fail with ErrClosed (DESIGN §3.7, §3.9).
func TestShutdownReportsUnflushedRecordsAndRefusesLaterPublishes(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.FlushTimeout(200*time.Millisecond))...)
	consumeAndAck(app)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	release := c.HoldProduce()
	defer release()
	var wg sync.WaitGroup
	errs := make(chan error, 5)
	for range 5 {
		wg.Go(func() { errs <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("stuck")}) })
	}
	require.Eventually(t, func() bool { return app.Pending() == 5 }, kfaketest.WaitTimeout, time.Millisecond)
	err := app.Shutdown(ctx)
	require.ErrorIs(t, err, runtime.ErrUnflushed)
	require.Equal(t, int64(5), app.Unflushed())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, runtime.ErrUnflushed, "a publisher learns its record did not get out")
	}
	require.ErrorIs(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("late")}), runtime.ErrClosed)
}

// With kgo.MaxBufferedBytes, a Publish waits inside franz-go's Produce for byte space. Shutdown
// still ends within FlushTimeout: it fails that publish and the held one, counts both, and later
// publishes fail with ErrClosed (nothing waits for a lock the blocked publish holds).
func TestShutdownEndsAPublishWaitingForBufferedBytes(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.FlushTimeout(200*time.Millisecond),
		runtime.ProducerOpts(kgo.MaxBufferedBytes(1000)))...)
	release := c.HoldProduce()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	errs := make(chan error, 2)
	var wg sync.WaitGroup
	for range 2 { // 800 bytes each: the second does not fit beside the first, which the cluster holds
		wg.Go(func() { errs <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: make([]byte, 800)}) })
	}
	require.Eventually(t, func() bool { return app.Pending() == 2 }, kfaketest.WaitTimeout, time.Millisecond)
	err := app.Shutdown(ctx)
	require.ErrorIs(t, err, runtime.ErrUnflushed)
	require.ErrorContains(t, err, "2 records not acknowledged when the producer closed (FlushTimeout 200ms): context deadline exceeded")
	require.Equal(t, int64(2), app.Unflushed())
	wg.Wait()
	close(errs)
	for err := range errs {
		require.ErrorIs(t, err, runtime.ErrUnflushed)
	}
	require.ErrorIs(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("late")}), runtime.ErrClosed)
}

// A record whose Publish failed can be published again with a new ctx: Publish does not leave the
// first ctx in r.Context, where franz-go would find it ended and fail the record at once. franz-go
// fails it once its ctx ends, as it waits for its topic's metadata: Publish returns that answer.
func TestPublishTheSameRecordAgainAfterItsCtxEnded(t *testing.T) {
	c := kfaketest.New(t)
	app := runtime.New(appOpts(c)...)
	t.Cleanup(func() { stop(t, app) })
	r := &kgo.Record{Topic: "later", Value: []byte("v")}
	short, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	err := app.Publish(short, r)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the topic does not exist yet")
	if errors.Is(err, runtime.ErrUnconfirmed) { // franz-go's answer came after answerGrace: a loaded machine
		require.Eventually(t, func() bool { return app.Pending() == 0 }, kfaketest.WaitTimeout, time.Millisecond)
	}
	require.Nil(t, r.Context)
	c.CreateTopic(t, "later", 1)
	ctx, cancel2 := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel2()
	require.NoError(t, app.Publish(ctx, r))
	require.Nil(t, r.Context)
	got := c.ReadAll(t, "later", true)
	require.Len(t, got, 1)
	require.Equal(t, "v", string(got[0].Value))
}

// A Publish whose ctx ended with a cause (context.WithCancelCause) reports it beside ctx's error,
// whether the ctx ended before the record was handed to franz-go (which fails it with ctx.Err()
// alone: helper-98 saw only "context canceled") or while it waited for a buffer slot: errors.Is
// finds both, and nothing is produced.
func TestPublishReportsItsCtxCause(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.MaxBufferedRecords(1)))...)
	t.Cleanup(func() { stop(t, app) })
	cause := errors.New("request abandoned")

	ended, cancel := context.WithCancelCause(context.Background())
	cancel(cause)
	err := app.Publish(ended, &kgo.Record{Topic: "out", Value: []byte("ended")})
	require.EqualError(t, err, `tidemark: publish to "out": context canceled: request abandoned`)
	require.ErrorIs(t, err, context.Canceled)
	require.ErrorIs(t, err, cause)

	ctx, cancelAll := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancelAll()
	release := c.HoldProduce()
	defer release()
	held := make(chan error, 1)
	go func() { held <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("held")}) }()
	require.Eventually(t, func() bool { return app.Pending() == 1 }, kfaketest.WaitTimeout, time.Millisecond)
	waiting, cancelWaiting := context.WithCancelCause(context.Background())
	waited := make(chan error, 1)
	go func() { waited <- app.Publish(waiting, &kgo.Record{Topic: "out", Value: []byte("waiting")}) }()
	cancelWaiting(cause) // the one slot is the held record's: the publish waits for it, or has not started
	err = <-waited
	require.EqualError(t, err, `tidemark: publish to "out": context canceled: request abandoned`)
	require.ErrorIs(t, err, cause)
	release()
	require.NoError(t, <-held)
	got := c.ReadAll(t, "out", true)
	require.Len(t, got, 1)
	require.Equal(t, "held", string(got[0].Value))
}

// A Start that fails validation closes a producer a Publish opened before it, and reports what that
// close did not flush with the configuration errors; the Shutdown the docs ask for reports it again
// and the count stays (a second close changes nothing).
func TestFailedStartReportsRecordsItsProducerDidNotFlush(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	app := runtime.New(appOpts(c, runtime.FlushTimeout(200*time.Millisecond))...)
	runtime.Handle(app, runtime.Topic("in").Group("g"), ack, runtime.Workers(0))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("early")}))
	release := c.HoldProduce()
	defer release()
	held := make(chan error, 1)
	go func() { held <- app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("held")}) }()
	require.Eventually(t, func() bool { return app.Pending() == 1 }, kfaketest.WaitTimeout, time.Millisecond)

	err := app.Start(ctx)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
	require.Equal(t, `Topic("in"): Workers`, ce.Option)
	require.ErrorIs(t, err, runtime.ErrUnflushed)
	require.Equal(t, int64(1), app.Unflushed())
	require.ErrorIs(t, <-held, runtime.ErrUnflushed)

	require.ErrorIs(t, app.Shutdown(ctx), runtime.ErrUnflushed)
	require.Equal(t, int64(1), app.Unflushed())
}

// A Publish before Start keeps the promises Start checks: with idempotent writes turned off, a
// transactional id, manual flushing (nothing would flush the record: Publish hung until Shutdown)
// or DefaultProduceTopicAlways (dead letters went to the default topic), it fails, and nothing is
// produced.
func TestPublishBeforeStartRefusesWhatStartRefuses(t *testing.T) {
	for name, opts := range map[string][]kgo.Opt{
		"kgo.DisableIdempotentWrite":             {kgo.DisableIdempotentWrite(), kgo.RequiredAcks(kgo.NoAck())},
		"kgo.TransactionalID":                    {kgo.TransactionalID("x")},
		"kgo.ManualFlushing":                     {kgo.ManualFlushing()},
		"kgo.DefaultProduceTopicAlways":          {kgo.DefaultProduceTopic("elsewhere"), kgo.DefaultProduceTopicAlways()},
		"option 2 is a consumer or group option": {kgo.ProducerLinger(0), kgo.ConsumerGroup("g")},
	} {
		t.Run(name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("out", 1))
			app := runtime.New(appOpts(c, runtime.ProducerOpts(opts...))...)
			t.Cleanup(func() { stop(t, app) })
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			err := app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("v")})
			require.ErrorContains(t, err, "tidemark: producer: "+name)
			require.Empty(t, c.ReadAll(t, "out", false))
		})
	}
}

type order struct {
	ID string `json:"id"`
}

type receipt struct {
	OrderID string `json:"order_id"`
}

// A reply is published with the input's key and acknowledged before the input is settled; a reply
// the topic rejects retries the input, and exactly one reply remains (DESIGN §3.9, Tracked).
func TestReplyFailureRetriesTheInput(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("done", 1))
	c.Produce(t, &kgo.Record{Topic: "in", Key: []byte("key-1"), Value: []byte(`{"id":"o1"}`)})
	fault := c.FailProduce("done", 1, kerr.InvalidRecord)
	var calls atomic.Int32
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.JSONReply(func(_ context.Context, o order) (receipt, error) {
			calls.Add(1)
			return receipt{OrderID: o.ID}, nil
		}), runtime.Reply("done"), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	stop(t, app)
	require.Equal(t, 1, fault.Hits())
	require.Equal(t, int32(2), calls.Load(), "the input was handled again after its reply failed")
	replies := c.ReadAll(t, "done", true)
	require.Len(t, replies, 1)
	require.Equal(t, "key-1", string(replies[0].Key))
	require.Equal(t, `{"order_id":"o1"}`, string(replies[0].Value))
}

// JSONReply needs Reply, and Reply needs JSONReply (DESIGN §3.10).
func TestReplyConfigurationErrors(t *testing.T) {
	reply := runtime.JSONReply(func(context.Context, order) (receipt, error) { return receipt{}, nil })
	for _, tc := range []struct {
		name   string
		h      runtime.Handler
		opts   []runtime.HandleOption
		option string
	}{
		{"JSONReply without Reply", reply, nil, `Topic("in"): JSONReply`},
		{"Reply without JSONReply", ack, []runtime.HandleOption{runtime.Reply("done")}, `Topic("in"): Reply`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			app := runtime.New(runtime.Brokers("127.0.0.1:1"), runtime.DefaultGroup("g"), runtime.Logger(testLogger()))
			runtime.Handle(app, runtime.Topic("in"), tc.h, tc.opts...)
			err := app.Start(context.Background())
			var ce *runtime.ConfigError
			require.ErrorAs(t, err, &ce)
			require.Equal(t, tc.option, ce.Option)
		})
	}
}

// A consume-only App opens no producer connection (DESIGN §3.9).
func TestConsumeOnlyAppOpensNoProducerConnection(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b")
	var dials atomic.Int32
	d := &net.Dialer{}
	app := runtime.New(appOpts(c, runtime.ProducerOpts(
		kgo.ClientID("tidemark-producer"),
		kgo.Dialer(func(ctx context.Context, network, host string) (net.Conn, error) {
			dials.Add(1)
			return d.DialContext(ctx, network, host)
		})))...)
	consumeAndAck(app)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	require.Equal(t, int32(0), dials.Load())
}
