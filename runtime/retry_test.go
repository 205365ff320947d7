package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
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

// hv returns every value of header key in r, in order.
func hv(r *kgo.Record, key string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// calls records handler calls with their deliveries, safely from many lanes.
type calls struct {
	mu sync.Mutex
	ds []*kgo.Record
	at []int
	ts []time.Time
}

func (c *calls) add(d *runtime.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ds = append(c.ds, d.Record())
	c.at = append(c.at, d.Attempt())
	c.ts = append(c.ts, time.Now())
}

func (c *calls) snapshot() ([]*kgo.Record, []int, []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]*kgo.Record(nil), c.ds...), append([]int(nil), c.at...), append([]time.Time(nil), c.ts...)
}

func (c *calls) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.ds)
}

var fastBackoff = runtime.Backoff(func(int, error) time.Duration { return 10 * time.Millisecond })

// MaxAttempts(3) + DeadLetter: attempts 1, 2, 3 (counts none, "1", "2"), then exactly one
// dead-letter record naming the original, and the committed offset passes the original and both
// copies (DESIGN §3.3).
func TestMaxAttemptsThenDeadLetter(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("in.dlq", 1))
			orig := c.Produce(t, &kgo.Record{Topic: "in", Key: []byte("k1"), Value: []byte("v1"),
				Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("t-1")}}})[0]
			var got calls
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
					got.add(d)
					return errors.New("bank down")
				}), runtime.MaxAttempts(3), runtime.DeadLetter("in.dlq"), fastBackoff)
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
			stop(t, app)

			recs, attempts, _ := got.snapshot()
			require.Equal(t, []int{1, 2, 3}, attempts)
			require.Equal(t, [][]string{nil, {"1"}, {"2"}},
				[][]string{hv(recs[0], retry.CountHeader), hv(recs[1], retry.CountHeader), hv(recs[2], retry.CountHeader)})
			for _, r := range recs {
				require.Equal(t, "k1", string(r.Key))
				require.Equal(t, "v1", string(r.Value))
				require.Equal(t, []string{"t-1"}, hv(r, "trace"), "user headers kept once")
			}
			dead := c.ReadAll(t, "in.dlq", true)
			require.Len(t, dead, 1)
			d := dead[0]
			require.Equal(t, "k1", string(d.Key))
			require.Equal(t, "v1", string(d.Value))
			want := map[string][]string{
				retry.CountHeader:   {"3"},
				dlq.TopicHeader:     {"in"},
				dlq.PartitionHeader: {"0"},
				dlq.OffsetHeader:    {"0"},
				dlq.TimestampHeader: {strconv.FormatInt(orig.Timestamp.UnixMilli(), 10)},
				dlq.GroupHeader:     {"g"},
				dlq.ErrorHeader:     {"bank down"},
				dlq.AttemptsHeader:  {"3"},
				"trace":             {"t-1"},
			}
			for k, v := range want {
				require.Equal(t, v, hv(d, k), k)
			}
		})
	}
}

// MaxAttempts(2) without a dead-letter topic: two deliveries (the original and one copy on the
// source topic), then the record is dropped as spent (DESIGN §3.3).
func TestMaxAttemptsWithoutDeadLetterDropsTheSpentRecord(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "x")
	var got calls
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			return errors.New("no")
		}), runtime.MaxAttempts(2), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	_, attempts, _ := got.snapshot()
	require.Equal(t, []int{1, 2}, attempts)
	require.Len(t, c.ReadAll(t, "in", true), 2, "the original and one copy")
	spent := obs.outcomes(runtime.OutcomeSpent)
	require.Len(t, spent, 1)
	require.Equal(t, int64(1), spent[0].Offset)
}

// DeadLetter without MaxAttempts: the first failure goes to the dead-letter topic; Drop goes
// there too when one is declared, and is simply settled when none is (DESIGN §3.3).
func TestDeadLetterWithoutCapAndDrops(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1), kfaketest.Topic("plain", 1))
	c.ProduceValues(t, "in", 0, "fail", "drop", "ok")
	c.ProduceValues(t, "plain", 0, "drop")
	var got calls
	h := runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		got.add(d)
		switch string(d.Record().Value) {
		case "fail":
			return errors.New("failed")
		case "drop":
			return runtime.Drop(errors.New("unwanted"))
		}
		return nil
	})
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), h, runtime.DeadLetter("dlq"))
	runtime.Handle(app, runtime.Topic("plain").Group("g2").Commit(runtime.Tracked), h)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	c.WaitCommitted(t, "g2", "plain", map[int32]int64{0: 1})
	stop(t, app)
	require.Equal(t, 4, got.len(), "each record handled once")
	dead := c.ReadAll(t, "dlq", true)
	require.Len(t, dead, 2)
	require.Equal(t, "fail", string(dead[0].Value))
	require.Equal(t, []string{"failed"}, hv(dead[0], dlq.ErrorHeader))
	require.Equal(t, []string{"1"}, hv(dead[0], dlq.AttemptsHeader))
	require.Equal(t, "drop", string(dead[1].Value))
	require.Equal(t, []string{"unwanted"}, hv(dead[1], dlq.ErrorHeader))
	require.Equal(t, []string{"1"}, hv(dead[1], dlq.OffsetHeader))
}

// RetryAfter(d): the copy is on the topic at once with not-before = failure time + d, and the
// next call starts no earlier than that, with count "1" (DESIGN §3.3).
func TestRetryAfterDelaysTheCopy(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "later")
	var got calls
	var failedAt time.Time
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				failedAt = time.Now()
				return runtime.RetryAfter(300*time.Millisecond, errors.New("not yet"))
			}
			return nil
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	recs, attempts, times := got.snapshot()
	require.Equal(t, []int{1, 2}, attempts)
	nb, ok := retry.NotBefore(recs[1])
	require.True(t, ok)
	require.GreaterOrEqual(t, nb.UnixMilli(), failedAt.Add(300*time.Millisecond).UnixMilli()-1)
	require.Less(t, nb.Sub(failedAt), 300*time.Millisecond+5*time.Second, "not-before is set from the failure time")
	require.False(t, times[1].Before(nb), "handled no earlier than its not-before time")
	require.Equal(t, []string{"1"}, hv(recs[1], retry.CountHeader))
	copies := c.ReadAll(t, "in", true)
	require.Len(t, copies, 2)
	require.Equal(t, hv(recs[1], retry.NotBeforeHeader), hv(copies[1], retry.NotBeforeHeader))
}

// RetryToSource sends each copy back to the topic and partition it came from, keyless records
// included (DESIGN §3.3).
func TestRetryToSourceKeepsTopicAndPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 3), kfaketest.Topic("b", 2))
	c.ProduceValues(t, "a", 2, "a2")
	c.ProduceValues(t, "b", 1, "b1")
	var got calls
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topics("a", "b").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return errors.New("once")
			}
			return nil
		}), runtime.MaxAttempts(2), runtime.RetryToSource(), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "a", map[int32]int64{2: 2})
	c.WaitCommitted(t, "g", "b", map[int32]int64{1: 2})
	stop(t, app)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 2}, c.HighWatermarks(t, "a"))
	require.Equal(t, map[int32]int64{0: 0, 1: 2}, c.HighWatermarks(t, "b"))
	require.Equal(t, 4, got.len())
}

// A copy made by group A is settled by group B without calling B's handler; B handles the
// original once (DESIGN §3.3).
func TestAnotherGroupsCopyIsSettledUnhandled(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "r")
	var a, b calls
	obs := &observer{}
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("A").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			a.add(d)
			if d.Attempt() == 1 {
				return errors.New("retry me")
			}
			return nil
		}), runtime.MaxAttempts(2), fastBackoff)
	appB := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(appB, runtime.Topic("in").Group("B").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error { b.add(d); return nil }))
	start(t, app)
	start(t, appB)
	c.WaitCommitted(t, "A", "in", map[int32]int64{0: 2})
	c.WaitCommitted(t, "B", "in", map[int32]int64{0: 2})
	stop(t, appB)
	recs, _, _ := b.snapshot()
	require.Len(t, recs, 1)
	require.Equal(t, int64(0), recs[0].Offset)
	require.Equal(t, 2, a.len())
	foreign := obs.outcomes(runtime.OutcomeForeignCopy)
	require.Len(t, foreign, 1)
	require.Equal(t, int64(1), foreign[0].Offset)
}

// A record forwarded with a retry copy's headers is a retry copy to the group that reads it: that
// group skips it as another group's copy, with a Debug line naming the group that made it;
// forwarded with retry.UserHeaders it is handled (helper-136: a service chained behind another
// lost every record the first had retried, with no log line at all).
func TestAForwardedCopyIsHandledOnlyWithoutItsRetryHeaders(t *testing.T) {
	for _, tc := range []struct {
		name    string
		headers func([]kgo.RecordHeader) []kgo.RecordHeader
		handled []string
	}{
		{"its headers whole", func(hs []kgo.RecordHeader) []kgo.RecordHeader { return hs }, []string{"a", "c"}},
		{"retry.UserHeaders", retry.UserHeaders, []string{"a", "b", "c"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("raw", 1), kfaketest.Topic("fwd", 1))
			c.ProduceValues(t, "raw", 0, "a", "b", "c")
			var out lockedBuffer
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.Observe(obs),
				runtime.Logger(slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))))...)
			runtime.Handle(app, runtime.Topic("raw").Group("enrich").Commit(runtime.Tracked),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					r := d.Record()
					if string(r.Value) == "b" && d.Attempt() == 1 {
						return errors.New("retry b")
					}
					return app.Publish(ctx, &kgo.Record{Topic: "fwd", Value: r.Value, Headers: tc.headers(r.Headers)})
				}), runtime.MaxAttempts(2), fastBackoff)
			var got calls
			runtime.Handle(app, runtime.Topic("fwd").Group("orders").Commit(runtime.Tracked),
				runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error { got.add(d); return nil }))
			start(t, app)
			c.WaitCommitted(t, "enrich", "raw", map[int32]int64{0: 4}) // a, b, c and b's copy
			c.WaitCommitted(t, "orders", "fwd", map[int32]int64{0: 3})
			stop(t, app)
			recs, _, _ := got.snapshot()
			var vals []string
			for _, r := range recs {
				vals = append(vals, string(r.Value))
			}
			require.ElementsMatch(t, tc.handled, vals)
			skipped := obs.outcomes(runtime.OutcomeForeignCopy)
			require.Len(t, skipped, 3-len(tc.handled))
			line := "another group's retry copy settled without the handler"
			if len(skipped) == 0 {
				require.NotContains(t, out.String(), line)
				return
			}
			require.Equal(t, "orders", skipped[0].Group)
			require.Contains(t, out.String(), fmt.Sprintf(`level=DEBUG msg="tidemark: %s" subscription="Topic(\"fwd\")" group=orders mode=Tracked topic=fwd partition=0 offset=%d generation=1 attempt=0 copy_group=enrich`+"\n", line, skipped[0].Offset))
		})
	}
}

// Another group's copy is settled in its place in the partition's order, not ahead of it: a
// subscription that makes no copies of its own never commits past a record that has not
// finished, Auto included (docs/commit-modes.md). The copy sat in a unit of its own, a second lane
// settled it at once, and Auto marked past the records before it: a graceful shutdown while
// offset 0 ran committed 11 (helper-55). Here offset 0 waits for the copy's settlement, at most
// 1 s (it never comes now), so settling it out of order shows in the order of the events.
func TestAnotherGroupsCopyWaitsForTheRecordsBeforeIt(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Tracked, runtime.Auto} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, numbered(10)...)
			cp := retry.Copy(&kgo.Record{Topic: "in", Offset: 3, Value: []byte("x")}, "other-group", 1, time.Now())
			cp.Topic, cp.Partition = "in", 0
			c.ProduceTo(t, 0, cp)
			copySettled := make(chan struct{})
			obs := &observer{onSettled: func(e runtime.SettledEvent) {
				if e.Outcome == runtime.OutcomeForeignCopy {
					close(copySettled)
				}
			}}
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if d.Record().Offset == 0 {
						select {
						case <-copySettled:
						case <-time.After(time.Second):
						}
					}
					return nil
				}), runtime.Workers(2))
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 11})
			stop(t, app)
			require.Equal(t, offsetRange(0, 11), obs.settledOffsets())
			require.Len(t, obs.outcomes(runtime.OutcomeForeignCopy), 1)
		})
	}
}

// An undecodable record goes to the dead-letter topic with its exact bytes, and the partition
// moves on (DESIGN §3.3, §3.8).
func TestUndecodableRecordReachesTheDeadLetterTopicByteForByte(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
	c.Produce(t, &kgo.Record{Topic: "in", Value: []byte{0xFF, 0xFE, 0x00}}, &kgo.Record{Topic: "in", Value: []byte(`{"id":"ok"}`)})
	var ids []string
	var mu sync.Mutex
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.JSON(func(_ context.Context, p payout) error {
			mu.Lock()
			defer mu.Unlock()
			ids = append(ids, p.ID)
			return nil
		}), runtime.DeadLetter("dlq"))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	require.Equal(t, []string{"ok"}, ids)
	dead := c.ReadAll(t, "dlq", true)
	require.Len(t, dead, 1)
	require.Equal(t, []byte{0xFF, 0xFE, 0x00}, dead[0].Value)
	require.Len(t, hv(dead[0], dlq.ErrorHeader), 1)
	require.Contains(t, hv(dead[0], dlq.ErrorHeader)[0], "could not be decoded")
}

// A dead-letter or retry topic that does not exist fails Start, naming the option and the topic.
func TestStartFailsOnAMissingDeadLetterTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g"), ack, runtime.DeadLetter("nope.dlq"), runtime.RetryTo("nope.retry"))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	err := app.Start(ctx)
	require.ErrorContains(t, err, `tidemark: Topic("in"): RetryTo: topic "nope.retry" does not exist`)
	require.ErrorContains(t, err, `tidemark: Topic("in"): DeadLetter: topic "nope.dlq" does not exist`)
	var ce *runtime.ConfigError
	require.ErrorAs(t, err, &ce)
}

// RetryTo sends copies to a dedicated retry topic that the same subscription consumes.
func TestRetryToADedicatedTopic(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("in.retry", 1))
	c.Produce(t, &kgo.Record{Topic: "in", Key: []byte("k"), Value: []byte("v")})
	var got calls
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return errors.New("once")
			}
			return nil
		}), runtime.MaxAttempts(3), runtime.RetryTo("in.retry"), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	c.WaitCommitted(t, "g", "in.retry", map[int32]int64{0: 1})
	stop(t, app)
	recs, attempts, _ := got.snapshot()
	require.Equal(t, []int{1, 2}, attempts)
	require.Equal(t, "in.retry", recs[1].Topic)
	require.Equal(t, []string{"in"}, hv(recs[1], retry.OriginTopicHeader))
}

// A dead-letter record that fails to produce is never silent: the original stays in flight, is
// handled again in place after the backoff, and exactly one dead-letter record lands (DESIGN §3.3).
func TestFailedDeadLetterProduceKeepsTheRecordInFlight(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
	c.ProduceValues(t, "in", 0, "bad")
	fault := c.FailProduce("dlq", 1, kerr.InvalidRecord)
	var got calls
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			return runtime.Drop(errors.New("poison"))
		}), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	stop(t, app)
	require.Equal(t, 1, fault.Hits())
	_, attempts, _ := got.snapshot()
	require.Equal(t, []int{1, 2}, attempts)
	require.Len(t, c.ReadAll(t, "dlq", true), 1)
	retried := obs.outcomes(runtime.OutcomeRetry)
	require.Len(t, retried, 1)
	require.ErrorContains(t, retried[0].Err, "dead-letter record")
	require.ErrorIs(t, retried[0].Err, kerr.InvalidRecord)
}

// A dead-letter event says what sent the record there, and a typed handler can read its Delivery.
func TestDeadLetterEventsNameTheirReason(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
	c.ProduceValues(t, "in", 0, `{"id":"drop"}`, `{"id":"spend"}`, `{`)
	obs := &observer{}
	var attempts sync.Map
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.JSON(func(ctx context.Context, p payout) error {
			d, ok := runtime.DeliveryFrom(ctx)
			require.True(t, ok)
			attempts.Store(fmt.Sprint(p.ID, d.Attempt()), true)
			if p.ID == "drop" {
				return runtime.Drop(errors.New("unwanted"))
			}
			return errors.New("bank down")
		}), runtime.MaxAttempts(2), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	require.Eventually(t, func() bool { return len(c.ReadAll(t, "dlq", true)) == 3 }, kfaketest.WaitTimeout, 10*time.Millisecond)
	stop(t, app)
	reasons := map[int64]runtime.Outcome{}
	for _, e := range obs.outcomes(runtime.OutcomeDeadLetter) {
		reasons[e.Offset] = e.Reason
	}
	require.Equal(t, map[int64]runtime.Outcome{0: runtime.OutcomeDrop, 2: runtime.OutcomeDecodeFailure, 3: runtime.OutcomeSpent}, reasons)
	_, ok := attempts.Load("spend2")
	require.True(t, ok, "the copy's Delivery says attempt 2")
}

// A retry copy that can never be written (MESSAGE_TOO_LARGE on every produce) is a failed delivery
// each time: the record is handled again in place, OutcomeRetry with the produce's error, until
// the delivery that reaches MaxAttempts; without a DeadLetter that one is spent, dropped and
// committed past (docs/retries-and-dead-letters.md: When a copy or a dead letter cannot be
// produced). No copy reaches the topic.
func TestAnUnwritableCopyIsSpentAtMaxAttemptsWithoutDeadLetter(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	fault := c.FailProduce("in", -1, kerr.MessageTooLarge)
	defer fault.Remove()
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return errors.New("bank down") }),
		runtime.MaxAttempts(3), fastBackoff)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
	stop(t, app)
	obs.mu.Lock()
	defer obs.mu.Unlock()
	require.Len(t, obs.settled, 3)
	for i, e := range obs.settled {
		require.Equal(t, int64(0), e.Offset)
		require.Equal(t, i+1, e.Attempt)
		if i < 2 {
			require.Equal(t, runtime.OutcomeRetry, e.Outcome)
			require.ErrorIs(t, e.Err, kerr.MessageTooLarge)
		} else {
			require.Equal(t, runtime.OutcomeSpent, e.Outcome)
			require.EqualError(t, e.Err, "bank down")
		}
	}
	require.Equal(t, map[int32]int64{0: 1}, c.HighWatermarks(t, "in"), "no copy was written")
}
