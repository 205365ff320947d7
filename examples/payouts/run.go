package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// config is what main's flags set.
type config struct {
	brokers  []string      // a real cluster's seed brokers; none: start an embedded kfake cluster
	seed     bool          // with brokers: produce the bundled input first (always done on the embedded cluster)
	timeout  time.Duration // bounds the whole run, shutdown excepted
	workers  int           // lanes per subscription
	progress bool          // rewrite a progress line in place while waiting (stdout is a terminal)
	logger   *slog.Logger  // the runtime's logger
	cluster  *kfaketest.Cluster
	// cluster, when set, is the embedded cluster to run on instead of starting one; run leaves it
	// open, so a test can read it afterwards.
}

// topics are the demo's topics and their partitions, as the embedded cluster (or -seed on a real
// one) creates them.
var topics = []struct {
	name       string
	partitions int32
}{
	{"payouts", 6}, {"payouts.done", 6}, {"payouts.dlq", 1}, {"page-views", 6}, {"statements", 4},
}

// outputs are the topics pay_out writes to; the summary says how many records the run added.
var outputs = []string{"payouts.done", "payouts.dlq"}

// run runs the demo: it starts an embedded kfake cluster (or connects to cfg.brokers), produces
// the bundled input, runs the service until every group's committed offsets reach the high
// watermarks of its topics, shuts it down, writes the summary to stdout and returns it. The error
// says what went wrong (the timeout, a failed start, a shutdown that did not finish); the summary
// then says how far the run got.
func run(ctx context.Context, cfg config, stdout io.Writer) (Summary, error) {
	if cfg.timeout <= 0 {
		return newSummary(), fmt.Errorf("-timeout must be positive, got %s", cfg.timeout)
	}
	if cfg.seed && len(cfg.brokers) == 0 && cfg.cluster == nil {
		return newSummary(), errors.New("-seed needs -brokers: the embedded cluster is always seeded")
	}
	ctx, cancel := context.WithTimeout(ctx, cfg.timeout)
	defer cancel()
	if cfg.logger == nil {
		cfg.logger = slog.New(slog.DiscardHandler)
	}
	sum := newSummary()
	sum.Workers = cfg.workers
	tg, err := connect(ctx, cfg)
	if err != nil {
		return sum, fmt.Errorf("connect: %w", err)
	}
	defer tg.close()
	sum.Cluster = tg.name
	before, err := outputEnds(ctx, tg.off)
	if err != nil {
		return sum, fmt.Errorf("read the output topics' ends: %w", err)
	}
	if cfg.seed || len(cfg.brokers) == 0 {
		if err := seedInput(ctx, tg, &sum, cfg.progress, stdout); err != nil {
			return sum, err
		}
	}

	svc := newService()
	var groups []string
	for _, s := range subscriptions {
		groups = append(groups, s.group)
	}
	obs := newObserver(groups...)
	app := runtime.New(
		runtime.Brokers(tg.brokers...),
		runtime.ClientOpts(tg.clientOpts...),
		runtime.DefaultGroup("payouts"),
		runtime.Logger(cfg.logger),
		runtime.Observe(obs),
	)
	svc.register(app, cfg.workers)
	start := time.Now()
	if err := app.Start(ctx); err != nil {
		return sum, fmt.Errorf("start: %w", err)
	}
	waitErr := waitCaughtUp(ctx, app, tg.off, obs, cfg.progress, stdout, &sum, start)
	sum.Settling = time.Since(start)

	stopped := time.Now()
	sctx, scancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer scancel()
	shutErr := app.Shutdown(sctx)
	sum.Shutdown = time.Since(stopped)

	// The run's ctx may be over (the timeout): read the final state with a bound of its own.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer rcancel()
	var readErr error
	caughtUp := true
	for i, s := range subscriptions {
		sum.Subs[i].Counts = obs.counts(s.group)
		var done bool
		sum.Subs[i].Partitions, done, err = positions(rctx, tg.off, s.group, s.topic)
		readErr = errors.Join(readErr, err)
		caughtUp = caughtUp && done && err == nil
	}
	if waitErr != nil && caughtUp && shutErr == nil {
		// A signal or the timeout came after the last record settled, before the wait saw it (it
		// looks every 50 ms; helper-129), or the shutdown's drain settled what was left.
		waitErr = nil
	}
	sum.Complete = waitErr == nil
	if after, err := outputEnds(rctx, tg.off); err == nil {
		for i, t := range outputs {
			sum.Outputs = append(sum.Outputs, Output{Topic: t, Added: after[i] - before[i]})
		}
	} else {
		readErr = errors.Join(readErr, err)
	}
	sum.Effects = svc.effects()
	if _, err := sum.WriteTo(stdout); err != nil {
		readErr = errors.Join(readErr, err)
	}
	return sum, errors.Join(waitErr, shutErr, readErr)
}

// A target is the cluster a run uses: where it is, how to produce the input to it, how to read its
// offsets, and how to let it go.
type target struct {
	name       string // for the summary
	brokers    []string
	clientOpts []kgo.Opt // for the App's clients
	off        offsets
	produce    func(context.Context, []*kgo.Record) error
	close      func()
}

// connect returns the target cfg names: the real cluster at cfg.brokers (creating the demo's
// topics first when cfg.seed), cfg.cluster, or a new embedded kfake cluster with the demo's topics.
func connect(ctx context.Context, cfg config) (*target, error) {
	if len(cfg.brokers) > 0 {
		cl, err := kgo.NewClient(kgo.SeedBrokers(cfg.brokers...))
		if err != nil {
			return nil, err
		}
		adm := kadm.NewClient(cl)
		if cfg.seed {
			if err := createTopics(ctx, adm); err != nil {
				cl.Close()
				return nil, err
			}
		}
		return &target{
			name:    "cluster at " + strings.Join(cfg.brokers, ","),
			brokers: cfg.brokers,
			off:     kadmOffsets{adm},
			produce: func(ctx context.Context, recs []*kgo.Record) error { return cl.ProduceSync(ctx, recs...).FirstErr() },
			close:   cl.Close,
		}, nil
	}
	c, closeCluster := cfg.cluster, func() {}
	if c == nil {
		var opts []kfaketest.Option
		for _, t := range topics {
			opts = append(opts, kfaketest.Topic(t.name, t.partitions))
		}
		var err error
		if c, err = kfaketest.Start(opts...); err != nil {
			return nil, err
		}
		closeCluster = c.Close
	}
	return &target{
		name:       "embedded kfake cluster",
		brokers:    c.Addrs(),
		clientOpts: kfaketest.FastOpts(), // franz-go timings that react within tens of milliseconds
		off:        c,
		produce: func(ctx context.Context, recs []*kgo.Record) error {
			_, err := c.ProduceContext(ctx, recs...)
			return err
		},
		close: closeCluster,
	}, nil
}

// seedInput produces the bundled input to tg and counts it in sum.
func seedInput(ctx context.Context, tg *target, sum *Summary, progress bool, stdout io.Writer) error {
	start := time.Now()
	var all []*kgo.Record
	for _, in := range inputs {
		recs, err := in.records()
		if err != nil {
			return err
		}
		all = append(all, recs...)
	}
	if progress {
		fmt.Fprintf(stdout, "\r\033[Kproducing %d input records", len(all))
	}
	if err := tg.produce(ctx, all); err != nil {
		return fmt.Errorf("produce the input: %w", err)
	}
	sum.Seeding = time.Since(start)
	for _, r := range all {
		sum.input(r.Topic)
	}
	return nil
}

// waitCaughtUp waits until every subscription's group has committed up to the high watermarks of
// its topic (retry copies included, DESIGN §3.3), looking every 50ms. It fails when ctx ends or the
// App stops on its own (a fatal error). With progress it rewrites one line on w as it waits.
func waitCaughtUp(ctx context.Context, app *runtime.App, off offsets, obs *observer, progress bool,
	w io.Writer, sum *Summary, start time.Time) error {
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	if progress {
		defer fmt.Fprint(w, "\r\033[K") // clear the progress line
	}
	for {
		done := true
		for _, s := range subscriptions {
			_, caughtUp, err := positions(ctx, off, s.group, s.topic)
			if err != nil && ctx.Err() == nil {
				return err
			}
			done = done && caughtUp
		}
		if done {
			return nil
		}
		if progress {
			var b strings.Builder
			for i, s := range subscriptions {
				fmt.Fprintf(&b, "%s %d", s.name, obs.counts(s.group).Records)
				if in := sum.Subs[i].Input; in > 0 {
					fmt.Fprintf(&b, "/%d", in)
				}
				b.WriteString("   ")
			}
			fmt.Fprintf(w, "\r\033[Ksettling: %s%.1fs", b.String(), time.Since(start).Seconds())
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("not every record settled: %w", ctx.Err())
		case <-app.Done():
			_, err := app.State()
			return fmt.Errorf("the app stopped before every record settled: %w", err)
		case <-tick.C:
		}
	}
}

// outputEnds returns the summed high watermarks of each output topic.
func outputEnds(ctx context.Context, off offsets) ([]int64, error) {
	ends := make([]int64, len(outputs))
	for i, t := range outputs {
		hw, err := off.HighWatermarksContext(ctx, t)
		if err != nil {
			return nil, err
		}
		for _, o := range hw {
			ends[i] += o
		}
	}
	return ends, nil
}

// createTopics creates the demo's topics on a real cluster, leaving the ones that exist alone.
func createTopics(ctx context.Context, adm *kadm.Client) error {
	var errs []error
	for _, t := range topics {
		resp, err := adm.CreateTopic(ctx, t.partitions, -1, nil, t.name)
		if err == nil {
			err = resp.Err
		}
		if err != nil && !errors.Is(err, kerr.TopicAlreadyExists) {
			errs = append(errs, fmt.Errorf("create topic %s: %w", t.name, err))
		}
	}
	return errors.Join(errs...)
}
