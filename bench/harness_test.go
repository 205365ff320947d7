package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The shared cluster: started by the first benchmark that needs it, closed by TestMain. Inputs are
// produced into it once per run and read by every benchmark that names them, each consumer in a
// group of its own.
var shared struct {
	once sync.Once
	c    *kfaketest.Cluster
	err  error

	mu     sync.Mutex
	inputs map[string]map[int32]int64 // topic → high watermarks, once produced
}

// cluster returns the shared cluster, starting it on first use.
func cluster(tb testing.TB) *kfaketest.Cluster {
	tb.Helper()
	shared.once.Do(func() { shared.c, shared.err = kfaketest.Start() })
	if shared.err != nil {
		tb.Fatalf("start kfake: %v", shared.err)
	}
	return shared.c
}

// closeCluster closes the shared cluster if a benchmark started it.
func closeCluster() {
	if shared.c != nil {
		shared.c.Close()
	}
}

// recordSize is the size of every produced record's value (DESIGN §6: 100-byte records).
const recordSize = 100

// An input is a topic with its records, produced once per run.
type input struct {
	topic      string
	partitions int32
	records    int
	// key returns record i's key; nil means keyless records.
	key func(i int) []byte
}

// partitionOf is where record i goes: round-robin over the partitions, so with key = i mod k and k
// a multiple of the partition count, every key stays on one partition.
func (in input) partitionOf(i int) int32 { return int32(i % int(in.partitions)) }

// The inputs of the run.
var (
	// e2eInput is the end-to-end input: 1,000,000 records of 100 bytes on 8 partitions. The
	// Unordered I/O case, the Transactional comparison and the 1M memory backlog read it too.
	e2eInput = input{topic: "e2e", partitions: 8, records: envInt("TIDEMARK_BENCH_RECORDS", 1_000_000)}
)

// produce creates and fills in's topic once per run and returns its high watermarks.
func produce(tb testing.TB, in input) map[int32]int64 {
	tb.Helper()
	c := cluster(tb)
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if hw, ok := shared.inputs[in.topic]; ok {
		return hw
	}
	start := time.Now()
	ctx := context.Background()
	if err := c.CreateTopicContext(ctx, in.topic, in.partitions); err != nil {
		tb.Fatalf("create %s: %v", in.topic, err)
	}
	cl, err := kgo.NewClient(append(c.ClientOpts(),
		kgo.RecordPartitioner(kgo.ManualPartitioner()),
		kgo.ProducerBatchCompression(kgo.NoCompression()),
		kgo.ProducerLinger(5*time.Millisecond),
		kgo.MaxBufferedRecords(200_000),
	)...)
	if err != nil {
		tb.Fatalf("producer: %v", err)
	}
	defer cl.Close()
	var failed atomic.Pointer[error]
	for i := range in.records {
		r := &kgo.Record{Topic: in.topic, Partition: in.partitionOf(i), Value: value(i)}
		if in.key != nil {
			r.Key = in.key(i)
		}
		cl.Produce(ctx, r, func(_ *kgo.Record, err error) {
			if err != nil {
				failed.CompareAndSwap(nil, &err)
			}
		})
	}
	if err := cl.Flush(ctx); err != nil {
		tb.Fatalf("flush %s: %v", in.topic, err)
	}
	if p := failed.Load(); p != nil {
		tb.Fatalf("produce %s: %v", in.topic, *p)
	}
	hw, err := c.HighWatermarksContext(ctx, in.topic)
	if err != nil {
		tb.Fatalf("high watermarks of %s: %v", in.topic, err)
	}
	var total int64
	for _, o := range hw {
		total += o
	}
	if total != int64(in.records) {
		tb.Fatalf("%s holds %d records, want %d", in.topic, total, in.records)
	}
	if shared.inputs == nil {
		shared.inputs = make(map[string]map[int32]int64)
	}
	shared.inputs[in.topic] = hw
	tb.Logf("produced %d records of %d bytes to %s (%d partitions) in %v", in.records, recordSize, in.topic,
		in.partitions, time.Since(start).Round(time.Millisecond))
	return hw
}

// value is record i's value: recordSize bytes, distinct per record, so nothing compresses.
func value(i int) []byte {
	v := make([]byte, recordSize)
	for j := range v {
		v[j] = 'a' + byte((i+j*7)%26)
	}
	copy(v, strconv.Itoa(i))
	return v
}

var groupSeq atomic.Int64

// newGroup returns a consumer group name no other consumer of the run uses.
func newGroup(prefix string) string { return fmt.Sprintf("%s-%d", prefix, groupSeq.Add(1)) }

// waitCommitted polls the group's committed offsets every 5ms until every partition has reached
// want.
func waitCommitted(ctx context.Context, c *kfaketest.Cluster, group, topic string, want map[int32]int64) error {
	var last map[int32]int64
	for {
		got, err := c.CommittedContext(ctx, group, topic)
		if err == nil {
			last = got
			done := true
			for p, o := range want {
				done = done && got[p] >= o
			}
			if done {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("group %s on %s: committed %v, want %v: %w", group, topic, last, want, ctx.Err())
		case <-time.After(5 * time.Millisecond):
		}
	}
}

// benchLogger keeps the runtime's errors visible and drops the rest.
func benchLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
}

// app is one Tidemark App with one registration, as the benchmarks run it.
type app struct {
	topic   string
	group   string
	mode    runtime.CommitMode
	handler runtime.Handler
	opts    []runtime.HandleOption
	appOpts []runtime.Option
}

// start starts the App (the join included) and returns it.
func (a app) start(ctx context.Context, c *kfaketest.Cluster) (*runtime.App, error) {
	opts := append([]runtime.Option{
		runtime.Brokers(c.Addrs()...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.Logger(benchLogger()),
	}, a.appOpts...)
	ap := runtime.New(opts...)
	runtime.Handle(ap, runtime.Topic(a.topic).Group(a.group).Commit(a.mode), a.handler, a.opts...)
	if err := ap.Start(ctx); err != nil {
		return nil, err
	}
	return ap, nil
}

// shutdown stops an App, bounded by 30s.
func shutdown(ap *runtime.App) error {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return ap.Shutdown(ctx)
}

// runApp runs a until its group has committed the whole input and returns the time from New to
// that commit: the join, the consumption and the last commit.
func runApp(tb testing.TB, a app, hw map[int32]int64) time.Duration {
	tb.Helper()
	c := cluster(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stopProfile := profile(tb, a.group)
	start := time.Now()
	ap, err := a.start(ctx, c)
	if err != nil {
		tb.Fatalf("start %s: %v", a.mode, err)
	}
	err = waitCommitted(ctx, c, a.group, a.topic, hw)
	elapsed := time.Since(start)
	stopProfile()
	if serr := shutdown(ap); serr != nil && !errors.Is(serr, context.Canceled) {
		tb.Errorf("shutdown %s: %v", a.mode, serr)
	}
	if err != nil {
		tb.Fatalf("%s: %v", a.mode, err)
	}
	return elapsed
}

// runRaw consumes the input with a plain franz-go poll loop with autocommit, as a service without
// Tidemark would, and returns the time from the client's creation until its group has committed
// the whole input. clk, unless nil, ticks for every record polled. With handOff, the poll loop
// hands each poll to one other goroutine (a channel of one poll) that reads each record's offset
// and ticks: the least a runtime that handles records apart from its poll loop does.
func runRaw(tb testing.TB, topic, group string, hw map[int32]int64, clk *clock, handOff bool, opts ...kgo.Opt) time.Duration {
	tb.Helper()
	c := cluster(tb)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	stopProfile := profile(tb, group)
	start := time.Now()
	cl, err := kgo.NewClient(append(append(c.ClientOpts(),
		kgo.ConsumerGroup(group),
		kgo.ConsumeTopics(topic),
		kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()), // as Tidemark reads
	), opts...)...)
	if err != nil {
		tb.Fatalf("raw client: %v", err)
	}
	pollCtx, stopPoll := context.WithCancel(ctx)
	var n, offsets atomic.Int64
	polled, handled := make(chan struct{}), make(chan struct{})
	var polls chan kgo.Fetches
	if handOff {
		polls = make(chan kgo.Fetches, 1)
		go func() {
			defer close(handled)
			for fs := range polls {
				var sum int64
				fs.EachRecord(func(r *kgo.Record) {
					sum += r.Offset
					n.Add(1)
					if clk != nil {
						clk.tick()
					}
				})
				offsets.Add(sum)
			}
		}()
	} else {
		close(handled)
	}
	go func() {
		defer close(polled)
		if polls != nil {
			defer close(polls)
		}
		for {
			fs := cl.PollFetches(pollCtx)
			if fs.IsClientClosed() || pollCtx.Err() != nil {
				return
			}
			if polls != nil {
				select {
				case polls <- fs:
				case <-pollCtx.Done():
					return
				}
				continue
			}
			fs.EachRecord(func(*kgo.Record) {
				n.Add(1)
				if clk != nil {
					clk.tick()
				}
			})
		}
	}()
	err = waitCommitted(ctx, c, group, topic, hw)
	elapsed := time.Since(start)
	stopProfile()
	stopPoll()
	<-polled
	<-handled
	cl.Close()
	if err != nil {
		tb.Fatalf("raw: %v (polled %d)", err, n.Load())
	}
	return elapsed
}

// profileEnv names a directory: when set, each measured consumer run (from its start until its
// group has committed the input) writes a CPU profile there, named after its group.
const profileEnv = "TIDEMARK_BENCH_CPUPROFILE"

// profile starts a CPU profile of one run if profileEnv is set and returns the function that
// stops it. It logs and goes on when profiling is unavailable (go test's -cpuprofile holds it).
func profile(tb testing.TB, name string) (stop func()) {
	dir := os.Getenv(profileEnv)
	if dir == "" {
		return func() {}
	}
	path := filepath.Join(dir, name+".pprof")
	f, err := os.Create(path)
	if err != nil {
		tb.Logf("cpu profile: %v", err)
		return func() {}
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		tb.Logf("cpu profile: %v", err)
		f.Close()
		return func() {}
	}
	return func() {
		pprof.StopCPUProfile()
		f.Close()
		tb.Logf("cpu profile of %s: %s", name, path)
	}
}

// noop is the no-op handler.
var noop = runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil })

// A clock times a consumer's steady state: from the first record it sees to the last record of
// the input (want records), read once each. tick costs one atomic add per record.
type clock struct {
	want        int64
	n           atomic.Int64
	first, last atomic.Int64 // unix ns
}

func (c *clock) tick() {
	switch c.n.Add(1) {
	case 1:
		c.first.Store(time.Now().UnixNano())
	case c.want:
		c.last.Store(time.Now().UnixNano())
	}
}

// consumed is the time from the first record to the last; 0 if the input was not all seen.
func (c *clock) consumed() time.Duration {
	if c.n.Load() < c.want {
		return 0
	}
	return time.Duration(c.last.Load() - c.first.Load())
}

// handler is a no-op handler that ticks c.
func (c *clock) handler() runtime.Handler {
	return runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
		c.tick()
		return nil
	})
}

func total(hw map[int32]int64) int64 {
	var n int64
	for _, o := range hw {
		n += o
	}
	return n
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// envInt reads a positive integer knob from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// rounds is how many times the ratio benchmarks run each contender, interleaved; they report the
// median of each.
var rounds = envInt("TIDEMARK_BENCH_ROUNDS", 5)

// fetchCounter counts the records a client's fetches decoded (a kgo hook): more than the input
// means records were fetched again. lastAt is when the last batch was read (unix ns).
type fetchCounter struct{ records, lastAt atomic.Int64 }

func (f *fetchCounter) OnFetchBatchRead(_ kgo.BrokerMetadata, _ string, _ int32, m kgo.FetchBatchMetrics) {
	f.records.Add(int64(m.NumRecords))
	f.lastAt.Store(time.Now().UnixNano())
}

// pauseCounter counts the runtime's back-pressure pauses (an Observer).
type pauseCounter struct {
	runtime.NopObserver
	pauses atomic.Int64
}

func (p *pauseCounter) Paused(e runtime.PausedEvent) {
	if e.Paused {
		p.pauses.Add(1)
	}
}
