package bench

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The consumer process of the memory benchmark is this test binary, re-executed with childEnv set:
// TestMain runs runChild instead of the benchmarks. The other variables say what to consume.
const (
	childEnv        = "TIDEMARK_BENCH_CHILD" // "memory"
	childBrokersEnv = "TIDEMARK_BENCH_BROKERS"
	childTopicEnv   = "TIDEMARK_BENCH_TOPIC"
	childGroupEnv   = "TIDEMARK_BENCH_GROUP"
	childSlowEnv    = "TIDEMARK_BENCH_SLOW" // set: the handler sleeps 1ms; unset: it blocks
)

// childFetchMaxBytes is the consumer's kgo.FetchMaxBytes (DESIGN §6: 8 MiB).
const childFetchMaxBytes = 8 << 20

// childWorkers is the consumer's lane count.
const childWorkers = 8

// runChild runs the consumer process and returns its exit code. It consumes the topic in the
// Tracked mode with the default bounds (MaxInFlightPerPartition 1024, MaxPollRecords 500) and
// kgo.FetchMaxBytes(8 MiB), with a handler that blocks (or sleeps 1ms per record), and prints
// "held <records> paused <partitions> handled <records>" every 100ms; the parent reads its peak
// RSS from /proc and kills it.
func runChild(kind string) int {
	if kind != "memory" {
		fmt.Fprintf(os.Stderr, "unknown child kind %q\n", kind)
		return 2
	}
	slow := os.Getenv(childSlowEnv) != ""
	obs := &holdObserver{held: map[int32]int{}, paused: map[int32]bool{}}
	var (
		mu      sync.Mutex
		handled int
	)
	h := runtime.HandlerFunc(func(ctx context.Context, _ *runtime.Delivery) error {
		if !slow {
			<-ctx.Done() // blocked: the backlog waits
			return ctx.Err()
		}
		time.Sleep(time.Millisecond)
		mu.Lock()
		handled++
		mu.Unlock()
		return nil
	})
	ap := runtime.New(
		runtime.Brokers(strings.Split(os.Getenv(childBrokersEnv), ",")...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.ClientOpts(kgo.FetchMaxBytes(childFetchMaxBytes)),
		runtime.Logger(benchLogger()),
		runtime.Observe(obs),
	)
	runtime.Handle(ap, runtime.Topic(os.Getenv(childTopicEnv)).Group(os.Getenv(childGroupEnv)).Commit(runtime.Tracked),
		h, runtime.Workers(childWorkers))
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := ap.Start(ctx); err != nil {
		fmt.Fprintf(os.Stderr, "start: %v\n", err)
		return 1
	}
	for range time.Tick(100 * time.Millisecond) { // until the parent kills the process
		held, paused := obs.state()
		mu.Lock()
		n := handled
		mu.Unlock()
		fmt.Printf("held %d paused %d handled %d\n", held, paused, n)
	}
	return 0
}

// holdObserver keeps, per partition, the records held after the last poll and whether the
// partition is paused.
type holdObserver struct {
	runtime.NopObserver
	mu     sync.Mutex
	held   map[int32]int
	paused map[int32]bool
}

func (o *holdObserver) Delivered(e runtime.DeliveredEvent) {
	o.mu.Lock()
	o.held[e.Partition] = e.InFlight
	o.mu.Unlock()
}

func (o *holdObserver) InFlight(e runtime.InFlightEvent) {
	o.mu.Lock()
	o.held[e.Partition] = e.InFlight
	o.mu.Unlock()
}

func (o *holdObserver) Paused(e runtime.PausedEvent) {
	o.mu.Lock()
	o.paused[e.Partition] = e.Paused
	o.mu.Unlock()
}

func (o *holdObserver) state() (held, paused int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, n := range o.held {
		held += n
	}
	for _, p := range o.paused {
		if p {
			paused++
		}
	}
	return held, paused
}
