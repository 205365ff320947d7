package conformance

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// BrokersEnv is the environment variable FromEnv reads: comma-separated "host:port" seeds of a
// real cluster.
const BrokersEnv = "KAFKA_BROKERS"

// A Target is where scenarios run: a fresh in-process kfake cluster per scenario, or a real
// cluster that every scenario connects to with its own prefix.
type Target struct {
	brokers []string
	opts    []kfaketest.Option
}

// Kfake is the default Target: every scenario gets its own kfaketest.New cluster, with opts.
func Kfake(opts ...kfaketest.Option) Target { return Target{opts: opts} }

// Brokers targets a running cluster: every scenario calls kfaketest.Connect(t, brokers, opts...),
// so its topics, groups and transactional ids carry a prefix of their own. The cluster must allow
// transactions and let the test create and delete topics.
func Brokers(brokers []string, opts ...kfaketest.Option) Target {
	return Target{brokers: slices.Clone(brokers), opts: opts}
}

// FromEnv is Brokers with the seeds in KAFKA_BROKERS when it is set, Kfake otherwise.
func FromEnv() Target {
	var brokers []string
	for _, b := range strings.Split(os.Getenv(BrokersEnv), ",") {
		if b = strings.TrimSpace(b); b != "" {
			brokers = append(brokers, b)
		}
	}
	if len(brokers) == 0 {
		return Kfake()
	}
	return Brokers(brokers)
}

// Connected reports whether the Target is a real cluster, where kfake-only scenarios are skipped.
func (tg Target) Connected() bool { return len(tg.brokers) > 0 }

// String names the Target: "kfake" or "brokers a:9092,b:9092".
func (tg Target) String() string {
	if tg.Connected() {
		return "brokers " + strings.Join(tg.brokers, ",")
	}
	return "kfake"
}

func (tg Target) cluster(t *testing.T) *kfaketest.Cluster {
	t.Helper()
	if tg.Connected() {
		return kfaketest.Connect(t, tg.brokers, tg.opts...)
	}
	return kfaketest.New(t, tg.opts...)
}

// A scenario is one rule of DESIGN §3 as a test.
type scenario struct {
	name  string                                     // the subtest's name: "§3.2 Tracked retry without a policy: ..."
	needs string                                     // what it needs that only kfake has ("the commit log"), "" if nothing
	run   func(e *env)                               // the parent side
	child func(t *testing.T, env kfaketest.ChildEnv) // the crash runner's child, if it spawns one
}

// Run runs every conformance scenario against target, each as a subtest of t with its own
// cluster. On a real cluster the scenarios that need kfake are skipped, each with a line on stderr
// naming it and what it needs, and a summary line at the end. Call it from a test that does
// nothing else: the crash-runner scenarios re-execute that test in a child process.
func Run(t *testing.T, target Target) {
	var (
		mu      sync.Mutex
		skipped []string
	)
	for _, s := range scenarios() {
		t.Run(s.name, func(t *testing.T) {
			if s.child != nil {
				if env, ok := kfaketest.Child(); ok {
					s.child(t, env)
					return
				}
			}
			if s.needs != "" && target.Connected() {
				mu.Lock()
				skipped = append(skipped, s.name)
				mu.Unlock()
				loud(t, "SKIPPED on %s: %q needs %s (kfake only)", target, s.name, s.needs)
				t.SkipNow()
			}
			s.run(&env{T: t, c: target.cluster(t), target: target})
		})
	}
	if len(skipped) > 0 {
		loud(t, "%d scenarios SKIPPED on %s (they need kfake): %s", len(skipped), target, strings.Join(skipped, "; "))
	}
}

// loud logs to the test and to stderr (make test-real prints every SKIPPED line of its verbose
// log: go test hides a passing package's output).
func loud(t *testing.T, format string, args ...any) {
	t.Helper()
	msg := fmt.Sprintf(format, args...)
	t.Log(msg)
	fmt.Fprintln(os.Stderr, "conformance: "+msg)
}

// env is one scenario's world: its test, its cluster, and helpers that name things with the
// cluster's prefix.
type env struct {
	*testing.T
	c      *kfaketest.Cluster
	target Target
}

// name prefixes a topic, group or transactional id for this scenario's cluster.
func (e *env) name(s string) string { return e.c.Name(s) }

// topic creates a topic named name (prefixed) and returns its full name.
func (e *env) topic(name string, partitions int32) string {
	e.Helper()
	full := e.name(name)
	e.c.CreateTopic(e, full, partitions)
	return full
}

// kfake reports whether the kfake-only part of a scenario, what, can run; on a real cluster it
// says loudly that it is skipped.
func (e *env) kfake(what string) bool {
	e.Helper()
	if e.c.Connected() {
		loud(e.T, "SKIPPED on %s: the %s check of %q (kfake only)", e.target, what, e.Name())
		return false
	}
	return true
}

// logger discards the runtime's logs unless TIDEMARK_TEST_LOG is set.
func logger() *slog.Logger {
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// app builds an App against the scenario's cluster.
func (e *env) app(extra ...runtime.Option) *runtime.App {
	return runtime.New(append([]runtime.Option{
		runtime.Brokers(e.c.Addrs()...),
		runtime.ClientOpts(e.c.ClientOpts()...),
		runtime.Logger(logger()),
	}, extra...)...)
}

// start starts app (30s bound) and shuts it down when the scenario ends.
func (e *env) start(app *runtime.App) {
	e.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	require.NoError(e, app.Start(ctx))
	e.Cleanup(func() { e.stop(app) })
}

// stop shuts app down (20s bound), failing the scenario on an error. A second stop returns the
// first one's result.
func (e *env) stop(app *runtime.App) {
	e.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(e, app.Shutdown(ctx))
}

// eventually waits up to 20s for cond, failing with msg.
func (e *env) eventually(cond func() bool, msg string, args ...any) {
	e.Helper()
	require.Eventually(e, cond, 20*time.Second, 5*time.Millisecond, append([]any{msg}, args...)...)
}

// waitClosed waits up to 20s for ch to be closed.
func (e *env) waitClosed(ch <-chan struct{}, msg string, args ...any) {
	e.Helper()
	select {
	case <-ch:
	case <-time.After(20 * time.Second):
		e.Fatalf(msg, args...)
	}
}

// waitCommitted is Cluster.WaitCommitted with a bound of d instead of kfaketest.WaitTimeout.
func waitCommitted(e *env, group, topic string, want map[int32]int64, d time.Duration) {
	e.Helper()
	ctx, cancel := context.WithTimeout(e.Context(), d)
	defer cancel()
	if err := e.c.WaitCommittedContext(ctx, group, topic, want); err != nil {
		e.Fatalf("WaitCommitted %s/%s: %v", group, topic, err)
	}
}

// values writes one keyless record per value to partition p of topic and returns them.
func (e *env) values(topic string, p int32, vs ...string) []*kgo.Record {
	e.Helper()
	return e.c.ProduceValues(e, topic, p, vs...)
}

// A call is one handler call as a scenario saw it.
type call struct {
	rec     *kgo.Record
	attempt int
	gen     uint64
	at      time.Time
}

// calls records handler calls, safely from many lanes.
type calls struct {
	mu sync.Mutex
	cs []call
}

func (c *calls) add(d *runtime.Delivery) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.cs = append(c.cs, call{d.Record(), d.Attempt(), d.Generation(), time.Now()})
}

func (c *calls) all() []call {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.cs)
}

func (c *calls) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.cs)
}

// values returns the calls' record values, in call order.
func (c *calls) values() []string {
	var out []string
	for _, x := range c.all() {
		out = append(out, string(x.rec.Value))
	}
	return out
}

// attempts returns the calls' attempts, in call order.
func (c *calls) attempts() []int {
	var out []int
	for _, x := range c.all() {
		out = append(out, x.attempt)
	}
	return out
}

// tagged returns value@attempt per call, in call order: "b@2".
func (c *calls) tagged() []string {
	var out []string
	for _, x := range c.all() {
		out = append(out, fmt.Sprintf("%s@%d", x.rec.Value, x.attempt))
	}
	return out
}

// offsetsOf returns the offsets handled on partition p, in call order.
func (c *calls) offsetsOf(topic string, p int32) []int64 {
	var out []int64
	for _, x := range c.all() {
		if x.rec.Topic == topic && x.rec.Partition == p {
			out = append(out, x.rec.Offset)
		}
	}
	return out
}

// observer collects the runtime events scenarios assert on.
type observer struct {
	runtime.NopObserver
	mu        sync.Mutex
	settled   []runtime.SettledEvent
	delivered []runtime.DeliveredEvent
	paused    []runtime.PausedEvent
	rebal     []runtime.RebalancedEvent
	onRebal   func(runtime.RebalancedEvent)
}

func (o *observer) Settled(ev runtime.SettledEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.settled = append(o.settled, ev)
}

func (o *observer) Delivered(ev runtime.DeliveredEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered = append(o.delivered, ev)
}

func (o *observer) Paused(ev runtime.PausedEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.paused = append(o.paused, ev)
}

func (o *observer) Rebalanced(ev runtime.RebalancedEvent) {
	o.mu.Lock()
	o.rebal = append(o.rebal, ev)
	fn := o.onRebal
	o.mu.Unlock()
	if fn != nil {
		fn(ev)
	}
}

// outcomes returns the settled events with outcome out, in order.
func (o *observer) outcomes(out runtime.Outcome) []runtime.SettledEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var r []runtime.SettledEvent
	for _, ev := range o.settled {
		if ev.Outcome == out {
			r = append(r, ev)
		}
	}
	return r
}

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

// recValues returns the records' values, in order.
func recValues(rs []*kgo.Record) []string {
	out := make([]string, 0, len(rs))
	for _, r := range rs {
		out = append(out, string(r.Value))
	}
	return out
}

// sortedValues returns the records' values, sorted.
func sortedValues(rs []*kgo.Record) []string {
	return slices.Sorted(slices.Values(recValues(rs)))
}

// requireNonDecreasing fails unless the commits the cluster received for each of group's
// partitions of topic never go backwards (kfake only: the commit log).
func (e *env) requireNonDecreasing(group, topic string, parts ...int32) {
	e.Helper()
	if !e.kfake("non-decreasing commits") {
		return
	}
	for _, p := range parts {
		log := e.c.CommitLog().Of(group, topic, p)
		for i := 1; i < len(log); i++ {
			require.GreaterOrEqual(e, log[i].Offset, log[i-1].Offset,
				"partition %d: commit #%d (seq %d, member %s) went back: %v", p, i, log[i].Seq, log[i].Member, commitOffsets(log))
		}
	}
}

// requireCommitsAtMost fails unless every commit of group's partition asked for at most max
// (kfake only).
func (e *env) requireCommitsAtMost(group, topic string, p int32, max int64) {
	e.Helper()
	if !e.kfake("commit log bound") {
		return
	}
	for _, cm := range e.c.CommitLog().Of(group, topic, p) {
		require.LessOrEqual(e, cm.Offset, max, "a commit passed offset %d: %+v", max, cm)
	}
}

func commitOffsets(cs []kfaketest.Commit) []int64 {
	out := make([]int64, len(cs))
	for i, c := range cs {
		out[i] = c.Offset
	}
	return out
}

// gate is a channel closed at most once, by open.
type gate struct {
	once sync.Once
	ch   chan struct{}
}

func newGate() *gate { return &gate{ch: make(chan struct{})} }

func (g *gate) open() { g.once.Do(func() { close(g.ch) }) }

// wait blocks until the gate opens or ctx ends; it reports whether the gate opened.
func (g *gate) wait(ctx context.Context) bool {
	select {
	case <-g.ch:
		return true
	case <-ctx.Done():
		return false
	}
}

// fastBackoff retries after 10ms.
var fastBackoff = runtime.Backoff(func(int, error) time.Duration { return 10 * time.Millisecond })

// scenarios lists every scenario, in DESIGN order.
func scenarios() []scenario {
	var all []scenario
	for _, group := range [][]scenario{
		trackerScenarios(),
		outcomeScenarios(),
		retryScenarios(),
		txnScenarios(),
		batchScenarios(),
		laneScenarios(),
		rebalanceScenarios(),
		markerScenarios(),
		topicScenarios(),
	} {
		all = append(all, group...)
	}
	return all
}
