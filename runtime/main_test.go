package runtime_test

import (
	"context"
	"io"
	"log/slog"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if _, child := kfaketest.Child(); child {
		os.Exit(m.Run()) // a crash-runner subprocess: it is killed, leak checks mean nothing there
	}
	goleak.VerifyTestMain(m)
}

// testLogger discards logs unless TIDEMARK_TEST_LOG is set.
func testLogger() *slog.Logger {
	if os.Getenv("TIDEMARK_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// appOpts are the options every test App uses against c.
func appOpts(c *kfaketest.Cluster, extra ...runtime.Option) []runtime.Option {
	return append([]runtime.Option{
		runtime.Brokers(c.Addrs()...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.Logger(testLogger()),
	}, extra...)
}

// start starts app (20s bound) and makes sure it is shut down when the test ends.
func start(t *testing.T, app *runtime.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	t.Cleanup(func() { stop(t, app) })
}

// stop shuts app down (kfaketest.WaitTimeout bound) and fails the test on an error.
func stop(t *testing.T, app *runtime.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Shutdown(ctx))
}

// seen records what a handler saw, safely from many lanes.
type seen struct {
	mu   sync.Mutex
	recs []string
	atts []int
}

// handler returns a Handler that records each record's value and attempt in s and acks it.
func (s *seen) handler() runtime.Handler {
	return runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		s.add(string(d.Record().Value), d.Attempt())
		return nil
	})
}

func (s *seen) add(v string, attempt int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.recs = append(s.recs, v)
	s.atts = append(s.atts, attempt)
}

func (s *seen) values() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.recs...)
}

func (s *seen) attempts() []int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]int(nil), s.atts...)
}

func (s *seen) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.recs)
}

// eventually waits for cond, up to kfaketest.WaitTimeout, failing with msg.
func eventually(t *testing.T, cond func() bool, msg string, args ...any) {
	t.Helper()
	require.Eventually(t, cond, kfaketest.WaitTimeout, 5*time.Millisecond, append([]any{msg}, args...)...)
}

// observer collects the events tests assert on.
type observer struct {
	runtime.NopObserver
	mu        sync.Mutex
	settled   []runtime.SettledEvent
	delivered []runtime.DeliveredEvent
	paused    []runtime.PausedEvent
	rebal     []runtime.RebalancedEvent
	inflight  []runtime.InFlightEvent
	committed []runtime.CommittedEvent
	onRebal   func(runtime.RebalancedEvent)
	onSettled func(runtime.SettledEvent) // called after recording each event
}

func (o *observer) Settled(e runtime.SettledEvent) {
	o.mu.Lock()
	o.settled = append(o.settled, e)
	o.mu.Unlock()
	if o.onSettled != nil {
		o.onSettled(e)
	}
}

// settledOffsets returns the offsets of the settled events, in the order they were settled.
func (o *observer) settledOffsets() []int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var r []int64
	for _, e := range o.settled {
		r = append(r, e.Offset)
	}
	return r
}

func (o *observer) InFlight(e runtime.InFlightEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.inflight = append(o.inflight, e)
}

func (o *observer) Committed(e runtime.CommittedEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.committed = append(o.committed, e)
}

// lastCommitted returns the offset of the last Committed event of topic's partition p, -1 if none.
func (o *observer) lastCommitted(topic string, p int32) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	last := int64(-1)
	for _, e := range o.committed {
		if e.Topic == topic && e.Partition == p {
			last = e.Offset
		}
	}
	return last
}

func (o *observer) Delivered(e runtime.DeliveredEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.delivered = append(o.delivered, e)
}

// deliveredRecords returns the records of every Delivered event so far.
func (o *observer) deliveredRecords() (n int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, e := range o.delivered {
		n += e.Records
	}
	return n
}

func (o *observer) Paused(e runtime.PausedEvent) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.paused = append(o.paused, e)
}

func (o *observer) Rebalanced(e runtime.RebalancedEvent) {
	o.mu.Lock()
	o.rebal = append(o.rebal, e)
	fn := o.onRebal
	o.mu.Unlock()
	if fn != nil {
		fn(e)
	}
}

func (o *observer) outcomes(out runtime.Outcome) []runtime.SettledEvent {
	o.mu.Lock()
	defer o.mu.Unlock()
	var r []runtime.SettledEvent
	for _, e := range o.settled {
		if e.Outcome == out {
			r = append(r, e)
		}
	}
	return r
}

// await waits in a handler for ch, or for its ctx to end (the test failed, or a bound passed): then
// it returns ctx's error, for the handler to return.
func await(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
