package runtime_test

// The examples of the guides under docs/: each guide names the Example that holds its code. Every
// one runs against its own in-process kfake cluster (kfaketest) and prints only what is
// deterministic.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// guideCluster starts a kfake cluster with the given topics (name, partitions) for one example.
func guideCluster(topics map[string]int32) *kfaketest.Cluster {
	var opts []kfaketest.Option
	for name, n := range topics {
		opts = append(opts, kfaketest.Topic(name, n))
	}
	c, err := kfaketest.Start(opts...)
	if err != nil {
		panic(err)
	}
	return c
}

// guideApp returns an App on c that reacts quickly (kfaketest.FastOpts) and logs nothing.
func guideApp(c *kfaketest.Cluster, opts ...runtime.Option) *runtime.App {
	return runtime.New(append([]runtime.Option{
		runtime.Brokers(c.Addrs()...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.Logger(slog.New(slog.DiscardHandler)),
	}, opts...)...)
}

// must panics on an error: examples have no *testing.T.
func must(err error) {
	if err != nil {
		panic(err)
	}
}

// fast is a 10 ms backoff, so the examples do not wait 100 ms per retry.
var fast = runtime.Backoff(func(int, error) time.Duration { return 10 * time.Millisecond })

// headerLines prints r's headers in order, one per line, with unix-millisecond timestamps
// replaced by <unix ms> (they change from run to run).
func headerLines(r *kgo.Record) {
	for _, h := range r.Headers {
		v := string(h.Value)
		if strings.HasSuffix(h.Key, "-timestamp") || h.Key == retry.NotBeforeHeader {
			v = "<unix ms>"
		}
		fmt.Printf("  %s: %s\n", h.Key, v)
	}
}

// A log of what a handler saw, safe from many lanes.
type guideLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *guideLog) add(format string, args ...any) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, fmt.Sprintf(format, args...))
}

func (l *guideLog) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.lines)
}

// commit-modes.md: the same failure under Auto and Tracked. Auto refuses the retry (the record
// is not handled again); Tracked handles it again in place, before the records behind it.
func ExampleCommitMode() {
	c := guideCluster(map[string]int32{"orders": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "orders", 0, "a", "b", "c")
	must(err)

	run := func(group string, mode runtime.CommitMode) {
		var seen guideLog
		failed := false
		app := guideApp(c)
		runtime.Handle(app, runtime.Topic("orders").Group(group).Commit(mode),
			runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
				v := string(d.Record().Value)
				seen.add("%s/%d", v, d.Attempt())
				if v == "b" && !failed { // one lane (Workers defaults to 1): no race on failed
					failed = true
					return runtime.Retry(errors.New("store timeout"))
				}
				return nil
			}), fast)
		must(app.Start(ctx))
		must(c.WaitCommittedContext(ctx, group, "orders", map[int32]int64{0: 3}))
		must(app.Shutdown(ctx))
		fmt.Printf("%-8s handled %v, committed map[0:3]\n", mode.String()+":", seen.all())
	}
	run("auto-group", runtime.Auto)
	run("tracked-group", runtime.Tracked)
	// Output:
	// Auto:    handled [a/1 b/1 c/1], committed map[0:3]
	// Tracked: handled [a/1 b/1 b/2 c/1], committed map[0:3]
}

// retries-and-dead-letters.md: MaxAttempts(3) with a DeadLetter topic. Attempts 1 and 2 fail and
// become retry copies on the source partition; attempt 3 is spent and goes to the dead-letter
// topic once, with its provenance headers.
func ExampleMaxAttempts() {
	c := guideCluster(map[string]int32{"payouts": 1, "payouts.dlq": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceContext(ctx, &kgo.Record{Topic: "payouts", Key: []byte("acct-7"), Value: []byte("p1"),
		Headers: []kgo.RecordHeader{{Key: "trace-id", Value: []byte("abc")}}})
	must(err)

	var seen guideLog
	app := guideApp(c, runtime.DefaultGroup("payouts"))
	runtime.Handle(app, runtime.Topic("payouts").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			r := d.Record()
			seen.add("attempt %d: %s/%d@%d", d.Attempt(), r.Topic, r.Partition, r.Offset)
			return errors.New("bank down") // a plain error: retry under the policy
		}),
		runtime.MaxAttempts(3), runtime.DeadLetter("payouts.dlq"),
		runtime.Backoff(func(attempt int, _ error) time.Duration { return time.Duration(attempt) * 10 * time.Millisecond }))
	must(app.Start(ctx))
	// The original (offset 0) and its two copies (1, 2) are all settled.
	must(c.WaitCommittedContext(ctx, "payouts", "payouts", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))

	for _, l := range seen.all() {
		fmt.Println(l)
	}
	dead, err := c.ReadAllContext(ctx, "payouts.dlq", true)
	must(err)
	fmt.Printf("dead letters: %d, key %s, value %s\n", len(dead), dead[0].Key, dead[0].Value)
	headerLines(dead[0])
	// Output:
	// attempt 1: payouts/0@0
	// attempt 2: payouts/0@1
	// attempt 3: payouts/0@2
	// dead letters: 1, key acct-7, value p1
	//   trace-id: abc
	//   x-tidemark-retry-count: 3
	//   x-tidemark-origin-topic: payouts
	//   x-tidemark-origin-partition: 0
	//   x-tidemark-origin-offset: 0
	//   x-tidemark-origin-timestamp: <unix ms>
	//   x-tidemark-dlq-topic: payouts
	//   x-tidemark-dlq-partition: 0
	//   x-tidemark-dlq-offset: 0
	//   x-tidemark-dlq-timestamp: <unix ms>
	//   x-tidemark-dlq-group: payouts
	//   x-tidemark-dlq-error: bank down
	//   x-tidemark-dlq-attempts: 3
}

// retries-and-dead-letters.md: RetryAfter asks for a delayed copy. The copy is produced at once
// with x-tidemark-not-before; the consumer parks it (its offset stays in flight) and hands it to
// the handler once it is due.
func ExampleRetryAfter() {
	c := guideCluster(map[string]int32{"invoices": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "invoices", 0, "inv-1")
	must(err)

	var first time.Time
	var copyRec *kgo.Record
	var waited time.Duration
	app := guideApp(c, runtime.DefaultGroup("billing"))
	runtime.Handle(app, runtime.Topic("invoices").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Attempt() == 1 {
				first = time.Now()
				return runtime.RetryAfter(300*time.Millisecond, errors.New("rate limited"))
			}
			copyRec, waited = d.Record(), time.Since(first)
			return nil
		}))
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "billing", "invoices", map[int32]int64{0: 2}))
	must(app.Shutdown(ctx))

	fmt.Printf("attempt 2 is the copy at offset %d, handled %v after attempt 1\n",
		copyRec.Offset, waited >= 300*time.Millisecond-time.Millisecond /* not-before has ms precision */)
	headerLines(copyRec)
	// Output:
	// attempt 2 is the copy at offset 1, handled true after attempt 1
	//   x-tidemark-retry-count: 1
	//   x-tidemark-origin-topic: invoices
	//   x-tidemark-origin-partition: 0
	//   x-tidemark-origin-offset: 0
	//   x-tidemark-origin-timestamp: <unix ms>
	//   x-tidemark-retry-group: billing
	//   x-tidemark-not-before: <unix ms>
}

// retries-and-dead-letters.md: RetryTo sends copies to a dedicated retry topic, which the same
// subscription (group, handler, mode) also consumes.
func ExampleRetryTo() {
	c := guideCluster(map[string]int32{"emails": 1, "emails.retry": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceContext(ctx, &kgo.Record{Topic: "emails", Key: []byte("user-1"), Value: []byte("welcome")})
	must(err)

	var seen guideLog
	app := guideApp(c, runtime.DefaultGroup("mailer"))
	runtime.Handle(app, runtime.Topic("emails").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			seen.add("attempt %d from %s", d.Attempt(), d.Record().Topic)
			if d.Attempt() == 1 {
				return errors.New("smtp busy")
			}
			return nil
		}), runtime.MaxAttempts(5), runtime.RetryTo("emails.retry"), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "mailer", "emails", map[int32]int64{0: 1}))
	must(c.WaitCommittedContext(ctx, "mailer", "emails.retry", map[int32]int64{0: 1}))
	must(app.Shutdown(ctx))
	fmt.Println(seen.all())
	// Output:
	// [attempt 1 from emails attempt 2 from emails.retry]
}

// guideOutcomes is an Observer that records each Settled event as "offset: outcome (reason)".
type guideOutcomes struct {
	runtime.NopObserver
	log guideLog
}

func (o *guideOutcomes) Settled(e runtime.SettledEvent) {
	if e.Reason != 0 {
		o.log.add("%s/%d@%d: %s (reason %s)", e.Topic, e.Partition, e.Offset, e.Outcome, e.Reason)
		return
	}
	o.log.add("%s/%d@%d: %s", e.Topic, e.Partition, e.Offset, e.Outcome)
}

// retries-and-dead-letters.md: DeadLetter without MaxAttempts. A drop and the first failure both
// go to the dead-letter topic; the Settled event says why (Reason).
func ExampleDeadLetter() {
	c := guideCluster(map[string]int32{"events": 1, "events.dlq": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "events", 0, "unwanted", "failing", "fine")
	must(err)

	obs := &guideOutcomes{}
	app := guideApp(c, runtime.DefaultGroup("ingest"), runtime.Observe(obs))
	runtime.Handle(app, runtime.Topic("events").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			switch string(d.Record().Value) {
			case "unwanted":
				return runtime.Drop(errors.New("unknown event type"))
			case "failing":
				return errors.New("schema registry down")
			}
			return nil
		}), runtime.DeadLetter("events.dlq"))
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "ingest", "events", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))
	for _, l := range obs.log.all() {
		fmt.Println(l)
	}
	dead, err := c.ReadAllContext(ctx, "events.dlq", true)
	must(err)
	fmt.Println("dead letters:", len(dead))
	// Output:
	// events/0@0: dead_letter (reason drop)
	// events/0@1: dead_letter (reason retry)
	// events/0@2: ack
	// dead letters: 2
}

// retries-and-dead-letters.md: a copy made by another group. Group A retries with a copy on the
// shared topic; group B, reading the same topic, settles A's copy without calling its handler.
func Example_copiesFromOtherGroups() {
	c := guideCluster(map[string]int32{"signups": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "signups", 0, "u1")
	must(err)

	var seenA, seenB guideLog
	obsB := &guideOutcomes{}
	a := guideApp(c)
	runtime.Handle(a, runtime.Topic("signups").Group("crm").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			seenA.add("offset %d attempt %d", d.Record().Offset, d.Attempt())
			if d.Attempt() == 1 {
				return errors.New("crm down")
			}
			return nil
		}), runtime.MaxAttempts(2), fast)
	b := guideApp(c, runtime.Observe(obsB))
	runtime.Handle(b, runtime.Topic("signups").Group("analytics").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			seenB.add("offset %d attempt %d", d.Record().Offset, d.Attempt())
			return nil
		}))
	must(a.Start(ctx))
	must(b.Start(ctx))
	must(c.WaitCommittedContext(ctx, "crm", "signups", map[int32]int64{0: 2}))
	must(c.WaitCommittedContext(ctx, "analytics", "signups", map[int32]int64{0: 2}))
	must(b.Shutdown(ctx))
	must(a.Shutdown(ctx))
	fmt.Println("crm handled:      ", seenA.all())
	fmt.Println("analytics handled:", seenB.all())
	fmt.Println("analytics settled:", obsB.log.all())
	// Output:
	// crm handled:       [offset 0 attempt 1 offset 1 attempt 2]
	// analytics handled: [offset 0 attempt 1]
	// analytics settled: [signups/0@0: ack signups/0@1: foreign_copy]
}

// retries-and-dead-letters.md: a dead-letter produce that fails is never silent. The original
// stays in flight and is handled again in place after the backoff; one dead-letter record lands.
func Example_failedDeadLetterProduce() {
	c := guideCluster(map[string]int32{"in": 1, "in.dlq": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "in", 0, "poison")
	must(err)
	fault := c.FailProduce("in.dlq", 1, kerr.InvalidRecord) // the next produce to in.dlq fails

	obs := &guideOutcomes{}
	app := guideApp(c, runtime.DefaultGroup("g"), runtime.Observe(obs))
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			return runtime.Drop(errors.New("poison"))
		}), runtime.DeadLetter("in.dlq"), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "g", "in", map[int32]int64{0: 1}))
	must(app.Shutdown(ctx))
	dead, err := c.ReadAllContext(ctx, "in.dlq", true)
	must(err)
	fmt.Println("failed produces:", fault.Hits())
	fmt.Println(obs.log.all())
	fmt.Println("dead letters:", len(dead))
	// Output:
	// failed produces: 1
	// [in/0@0: retry in/0@0: dead_letter (reason drop)]
	// dead letters: 1
}

// transactions.md: read → process → write, exactly once. The JSONReply result and a Publish made
// with the handler's ctx go into the window's transaction, with the consumed offsets.
func ExampleTransactional() {
	c := guideCluster(map[string]int32{"payments": 1, "payments.done": 1, "audit": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "payments", 0, `{"id":"p1"}`, `{"id":"p2"}`, `{"id":"p3"}`)
	must(err)

	type payment struct {
		ID string `json:"id"`
	}
	type done struct {
		ID string `json:"id"`
	}
	app := guideApp(c, runtime.DefaultGroup("settlement"))
	runtime.Handle(app, runtime.Topic("payments").Commit(runtime.Transactional("settlement-pod-0")),
		runtime.JSONReply(func(ctx context.Context, p payment) (done, error) {
			// ctx is the window's: this publish is part of the transaction too.
			if err := app.Publish(ctx, &kgo.Record{Topic: "audit", Value: []byte("settled " + p.ID)}); err != nil {
				return done{}, err
			}
			return done(p), nil
		}),
		runtime.Reply("payments.done"), runtime.CommitInterval(100*time.Millisecond), runtime.WindowTimeout(10*time.Second))
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "settlement", "payments", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))

	for _, topic := range []string{"payments.done", "audit"} {
		recs, err := c.ReadAllContext(ctx, topic, true) // read_committed
		must(err)
		var vs []string
		for _, r := range recs {
			vs = append(vs, string(r.Value))
		}
		fmt.Printf("%s: %v\n", topic, vs)
	}
	// Output:
	// payments.done: [{"id":"p1"} {"id":"p2"} {"id":"p3"}]
	// audit: [settled p1 settled p2 settled p3]
}

// transactions.md: a retry with no policy aborts the window, which is read again from the
// committed offsets. The failed delivery counts (the next one is attempt 2), and a publish made
// with the aborted window's ctx is refused with ErrWindowClosed.
func ExampleErrWindowClosed() {
	c := guideCluster(map[string]int32{"in": 1, "out": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "in", 0, "x")
	must(err)

	var app *runtime.App
	var oldCtx context.Context // one lane: handler calls never overlap
	var seen guideLog
	app = guideApp(c, runtime.DefaultGroup("g"))
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Transactional("g-pod-0")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			seen.add("delivery of offset %d, attempt %d", d.Record().Offset, d.Attempt())
			if oldCtx == nil {
				oldCtx = ctx
				return runtime.Retry(errors.New("not yet")) // no policy: the window aborts
			}
			late := app.Publish(oldCtx, &kgo.Record{Topic: "out", Value: []byte("late")})
			seen.add("publish with the aborted window's ctx: ErrWindowClosed=%v", errors.Is(late, runtime.ErrWindowClosed))
			return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("x done")})
		}), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "g", "in", map[int32]int64{0: 1}))
	must(app.Shutdown(ctx))
	for _, l := range seen.all() {
		fmt.Println(l)
	}
	out, err := c.ReadAllContext(ctx, "out", true)
	must(err)
	fmt.Println("out:", len(out), string(out[0].Value))
	// Output:
	// delivery of offset 0, attempt 1
	// delivery of offset 0, attempt 2
	// publish with the aborted window's ctx: ErrWindowClosed=true
	// out: 1 x done
}

// batches.md: a batch is the head record plus what is already queued behind it, at most n. Each
// element has its own outcome: element 2 is retried in place, and comes back at the head of the
// next batch; the acked elements are not handled again.
func ExampleHandleBatch() {
	c := guideCluster(map[string]int32{"lines": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "lines", 0, "0", "1", "2", "3", "4", "5", "6", "7")
	must(err)

	var batches guideLog
	failed := false
	app := guideApp(c, runtime.DefaultGroup("ledger"))
	runtime.HandleBatch(app, runtime.Topic("lines").Commit(runtime.Tracked), 4,
		runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
			errs := make([]error, len(ds))
			var offs []int64
			for i, d := range ds {
				offs = append(offs, d.Record().Offset)
				if d.Record().Offset == 2 && !failed {
					failed = true
					errs[i] = runtime.Retry(errors.New("row locked"))
				}
			}
			batches.add("%v", offs)
			return errs
		}), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "ledger", "lines", map[int32]int64{0: 8}))
	must(app.Shutdown(ctx))
	fmt.Println(batches.all())
	// Output:
	// [[0 1 2 3] [2 4 5 6] [7]]
}

// batches.md: BatchAll gives the whole batch one outcome. The first call fails, so every element
// is retried in place, together.
func ExampleBatchAll() {
	c := guideCluster(map[string]int32{"rows": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "rows", 0, "r0", "r1", "r2")
	must(err)

	var batches guideLog
	calls := 0
	app := guideApp(c, runtime.DefaultGroup("loader"))
	runtime.HandleBatch(app, runtime.Topic("rows").Commit(runtime.Tracked), 100,
		runtime.BatchAll(func(ctx context.Context, ds []*runtime.Delivery) error {
			calls++
			var vs []string
			for _, d := range ds {
				vs = append(vs, fmt.Sprintf("%s/%d", d.Record().Value, d.Attempt()))
			}
			batches.add("%v", vs)
			if calls == 1 {
				return errors.New("warehouse busy") // every element is retried
			}
			return nil
		}), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "loader", "rows", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))
	fmt.Println(batches.all())
	// Output:
	// [[r0/1 r1/1 r2/1] [r0/2 r1/2 r2/2]]
}

// batches.md: JSONBatch decodes each element; one that does not decode is dropped (ErrDecode) and
// not passed to fn, which returns one error per value it received.
func ExampleJSONBatch() {
	c := guideCluster(map[string]int32{"statements": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "statements", 0, `{"line":1,"cents":500}`, `{"line":`, `{"line":3,"cents":0}`)
	must(err)

	type line struct {
		Line  int   `json:"line"`
		Cents int64 `json:"cents"`
	}
	var got guideLog
	obs := &guideOutcomes{}
	app := guideApp(c, runtime.DefaultGroup("reconciliation"), runtime.Observe(obs))
	runtime.HandleBatch(app, runtime.Topic("statements").Commit(runtime.Tracked), 500,
		runtime.JSONBatch(func(ctx context.Context, ls []line) []error {
			errs := make([]error, len(ls))
			for i, l := range ls {
				got.add("line %d", l.Line)
				if l.Cents == 0 {
					errs[i] = runtime.Drop(errors.New("empty line"))
				}
			}
			return errs
		}))
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "reconciliation", "statements", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))
	fmt.Println("fn got:", got.all())
	fmt.Println("settled:", obs.log.all())
	// Output:
	// fn got: [line 1 line 3]
	// settled: [statements/0@0: ack statements/0@1: decode_failure statements/0@2: drop]
}

// guideMetrics is a metrics Observer: counters by outcome, the last committed offset per
// partition. Its methods only touch atomics and a short mutex: they run on the runtime's
// goroutines and must not block.
type guideMetrics struct {
	runtime.NopObserver
	settled   [16]atomic.Int64 // by Outcome
	mu        sync.Mutex
	committed map[string]int64 // "group topic/partition" → next offset
}

func (m *guideMetrics) Settled(e runtime.SettledEvent) {
	if int(e.Outcome) < len(m.settled) {
		m.settled[e.Outcome].Add(1)
	}
}

func (m *guideMetrics) Committed(e runtime.CommittedEvent) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.committed == nil {
		m.committed = map[string]int64{}
	}
	m.committed[fmt.Sprintf("%s %s/%d", e.Group, e.Topic, e.Partition)] = e.Offset
}

// operations.md: an Observer that counts outcomes and remembers committed offsets.
func ExampleObserver() {
	c := guideCluster(map[string]int32{"orders": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "orders", 0, "ok", "bad", "flaky")
	must(err)

	m := &guideMetrics{}
	flaky := 0
	app := guideApp(c, runtime.DefaultGroup("orders"), runtime.Observe(m))
	runtime.Handle(app, runtime.Topic("orders").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			switch string(d.Record().Value) {
			case "bad":
				return runtime.Drop(errors.New("invalid order"))
			case "flaky":
				if flaky++; flaky == 1 {
					return errors.New("timeout")
				}
			}
			return nil
		}), fast)
	must(app.Start(ctx))
	must(c.WaitCommittedContext(ctx, "orders", "orders", map[int32]int64{0: 3}))
	must(app.Shutdown(ctx))
	for _, o := range []runtime.Outcome{runtime.OutcomeAck, runtime.OutcomeDrop, runtime.OutcomeRetry} {
		fmt.Printf("%s: %d\n", o, m.settled[o].Load())
	}
	m.mu.Lock()
	fmt.Println("last committed:", m.committed)
	m.mu.Unlock()
	// Output:
	// ack: 2
	// drop: 1
	// retry: 1
	// last committed: map[orders orders/0:3]
}

// operations.md: every runtime option at its default value, and the health accessors.
func ExampleNew() {
	c := guideCluster(map[string]int32{"payouts": 1})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	app := runtime.New(
		runtime.Brokers(c.Addrs()...),                 // required
		runtime.ClientOpts(kfaketest.FastOpts()...),   // default: none (franz-go's defaults)
		runtime.Logger(slog.New(slog.DiscardHandler)), // default: slog.Default()
		runtime.DefaultGroup("payouts"),               // default: "" (every subscription names one)
		runtime.Observe(runtime.NopObserver{}),        // default
		runtime.MaxPollRecords(500),                   // default: 500 records queued per lock hold
		runtime.RevokeDrainTimeout(5*time.Second),     // default: 5s
		runtime.ShutdownTimeout(30*time.Second),       // default: 30s (Run's Shutdown bound)
		runtime.FlushTimeout(30*time.Second),          // default: 30s
		runtime.QueueTimeout(0),                       // default: 0, wait as long as the ctx allows
		runtime.ProducerOpts(kgo.ProducerLinger(0)),   // default: linger 0
		// runtime.InstanceID("pod-0"),                    // default: "" (dynamic membership)
	)
	runtime.Handle(app,
		runtime.Topic("payouts").
			Group("payouts").        // default: DefaultGroup
			Commit(runtime.Tracked). // default: runtime.Auto
			Start(runtime.Earliest). // default: Earliest
			Config(),                // default: no extra franz-go options
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error { return nil }),
		runtime.Workers(1),                    // default: 1 lane
		runtime.ByPartition,                   // default ordering
		runtime.MaxInFlightPerPartition(1024), // default: 1024 records
		runtime.MaxInFlight(0),                // default: 0, no subscription-wide bound
		runtime.Backoff(retry.Default()),      // default: 100ms doubling to 30s
		runtime.OnPanic(runtime.PanicFail),    // default
		// runtime.MaxAttempts(n),                     // default: unset, no cap and no retry copies
		runtime.CommitInterval(100*time.Millisecond), // default: 100ms (Transactional only)
		runtime.WindowTimeout(30*time.Second),        // default: 30s (Transactional only)
	)
	state, _ := app.State()
	fmt.Println("before Start:", state)
	must(app.Start(ctx))
	state, _ = app.State()
	fmt.Println("after Start:", state, "pending", app.Pending())
	must(app.Shutdown(ctx))
	<-app.Done()
	state, reason := app.State()
	fmt.Println("after Shutdown:", state, reason, "unflushed", app.Unflushed())
	// Output:
	// before Start: New
	// after Start: Running pending 0
	// after Shutdown: Stopped <nil> unflushed 0
}

// operations.md: Run with a signal context. Run returns after a graceful shutdown bounded by
// ShutdownTimeout; here the handler ends the run itself once it has seen the last record.
func ExampleApp_Run() {
	c := guideCluster(map[string]int32{"jobs": 1})
	defer c.Close()
	_, err := c.ProduceValuesContext(context.Background(), "jobs", 0, "j1", "j2", "last")
	must(err)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	context.AfterFunc(ctx, stop)        // a second signal ends the process at once
	ctx, end := context.WithCancel(ctx) // stands in for the SIGTERM of an orchestrator
	defer end()

	app := guideApp(c, runtime.DefaultGroup("workers"), runtime.ShutdownTimeout(20*time.Second))
	runtime.Handle(app, runtime.Topic("jobs").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "last" {
				end()
			}
			return nil
		}))
	err = app.Run(ctx) // Start, serve until ctx ends, then Shutdown
	fmt.Println("Run returned:", err)
	committed, err := c.CommittedContext(context.Background(), "workers", "jobs")
	must(err)
	fmt.Println("committed:", committed)
	// Output:
	// Run returned: <nil>
	// committed: map[0:3]
}

// operations.md: sizing. Fetch sizes are franz-go options (ClientOpts); the runtime's bounds
// are Tidemark options.
func ExampleClientOpts() {
	c := guideCluster(map[string]int32{"clicks": 4})
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	app := runtime.New(
		runtime.Brokers(c.Addrs()...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.ClientOpts(
			kgo.FetchMaxBytes(16<<20),         // one fetch response: 16 MiB (franz-go default 50 MiB)
			kgo.FetchMaxPartitionBytes(1<<20), // per partition in a response: 1 MiB (the default)
			kgo.MaxConcurrentFetches(1),       // one buffered fetch at a time (default: one per broker)
		),
		runtime.MaxPollRecords(200), // records queued per lock hold
		runtime.Logger(slog.New(slog.DiscardHandler)),
	)
	runtime.Handle(app, runtime.Topic("clicks").Group("clicks").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error { return nil }),
		runtime.Workers(16), runtime.ByKey,
		runtime.MaxInFlightPerPartition(256), // pause a partition at 256 held records
		runtime.MaxInFlight(2048),            // pause them all at 2048 held records
	)
	must(app.Start(ctx))
	state, _ := app.State()
	fmt.Println(state)
	must(app.Shutdown(ctx))
	// Output:
	// Running
}
