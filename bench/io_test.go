package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An ioCase is one I/O-bound configuration: lanes whose handler waits latency per record. Its ideal
// throughput is lanes ÷ latency.
type ioCase struct {
	name    string
	in      input
	latency time.Duration
	lanes   int
	opts    []runtime.HandleOption
}

// keyMod1024 is the ByKey input's key: i mod 1,024, so with records assigned round-robin to 8
// partitions every key stays on one partition and each partition holds 128 keys.
func keyMod1024(i int) []byte { return fmt.Appendf(nil, "key-%04d", i%1024) }

// The I/O-bound cases of DESIGN §6, each sized to run about 2.5 to 4 seconds at the ideal rate.
var ioCases = []ioCase{
	{
		name: "ByPartition-1ms", latency: time.Millisecond, lanes: 16,
		in:   input{topic: "io-bypartition-1ms", partitions: 16, records: 64_000},
		opts: []runtime.HandleOption{runtime.Workers(16), runtime.ByPartition},
	},
	{
		name: "ByPartition-10ms", latency: 10 * time.Millisecond, lanes: 16,
		in:   input{topic: "io-bypartition-10ms", partitions: 16, records: 6_400},
		opts: []runtime.HandleOption{runtime.Workers(16), runtime.ByPartition},
	},
	{
		name: "ByKey-10ms", latency: 10 * time.Millisecond, lanes: 1024,
		in:   input{topic: "io-bykey-10ms", partitions: 8, records: 307_200, key: keyMod1024},
		opts: []runtime.HandleOption{runtime.Workers(1024), runtime.ByKey, runtime.MaxInFlightPerPartition(4096)},
	},
	{
		name: "Unordered-10ms", latency: 10 * time.Millisecond, lanes: 4096,
		in:   e2eInput, // 1,000,000 records on 8 partitions
		opts: []runtime.HandleOption{runtime.Workers(4096), runtime.Unordered, runtime.MaxInFlightPerPartition(1024)},
	},
}

// BenchmarkIOBound runs each I/O-bound case in the Tracked mode with a handler that sleeps for
// the case's latency (standing for a call to another service) and reports records/s from the
// first handler call to the last return, the ideal (lanes ÷ latency) and their ratio (goal ≥
// 0.9). For reference it also reports the handlers' mean measured time (time.Sleep overshoots its
// argument) and the records/s of a bare pool: the same number of goroutines running the same
// handler on the same number of items fed through a channel, without Kafka or Tidemark, which is
// what this machine allows that handler. As diagnostics it reports the records the client's
// fetches decoded per record of the input and the runtime's back-pressure pauses.
func BenchmarkIOBound(b *testing.B) {
	for _, tc := range ioCases {
		b.Run(tc.name, func(b *testing.B) {
			hw := produce(b, tc.in)
			n := total(hw)
			for range b.N {
				bare := barePool(tc.lanes, tc.latency, n)
				var (
					handled, slept atomic.Int64
					first, last    atomic.Int64 // unix nanos
				)
				h := runtime.HandlerFunc(func(_ context.Context, _ *runtime.Delivery) error {
					t0 := time.Now()
					first.CompareAndSwap(0, t0.UnixNano())
					time.Sleep(tc.latency)
					t1 := time.Now()
					slept.Add(int64(t1.Sub(t0)))
					if handled.Add(1) == n {
						last.Store(t1.UnixNano())
					}
					return nil
				})
				fc, pc := &fetchCounter{}, &pauseCounter{}
				runApp(b, app{topic: tc.in.topic, group: newGroup("io-" + tc.name), mode: runtime.Tracked, handler: h, opts: tc.opts,
					appOpts: []runtime.Option{runtime.ClientOpts(kgo.WithHooks(fc)), runtime.Observe(pc)}}, hw)
				elapsed := time.Duration(last.Load() - first.Load())
				rate := float64(n) / elapsed.Seconds()
				ideal := float64(tc.lanes) / tc.latency.Seconds()
				mean := time.Duration(slept.Load() / handled.Load())
				b.ReportMetric(rate, "rec/s")
				b.ReportMetric(ideal, "ideal-rec/s")
				b.ReportMetric(rate/ideal, "of-ideal")
				b.ReportMetric(float64(mean)/float64(time.Millisecond), "handler-ms")
				b.ReportMetric(bare, "bare-rec/s")
				b.ReportMetric(float64(fc.records.Load())/float64(n), "fetched/rec")
				b.ReportMetric(float64(pc.pauses.Load()), "pauses")
				b.Logf("%s: %d records in %v: %.0f records/s, %.3f of the ideal %.0f; mean handler time %v; bare pool %.0f records/s (%.3f of the ideal); fetched %.2f records per record, %d pauses",
					tc.name, n, elapsed.Round(time.Millisecond), rate, rate/ideal, ideal, mean, bare, bare/ideal,
					float64(fc.records.Load())/float64(n), pc.pauses.Load())
			}
		})
	}
}

// barePool runs n sleeps of latency on lanes goroutines fed by a channel and returns items/s from
// the first sleep to the last return: the ceiling of the handler on this machine.
func barePool(lanes int, latency time.Duration, n int64) float64 {
	ch := make(chan struct{}, 8192)
	go func() {
		for range n {
			ch <- struct{}{}
		}
		close(ch)
	}()
	var (
		wg    sync.WaitGroup
		first atomic.Int64
	)
	for range lanes {
		wg.Go(func() {
			for range ch {
				first.CompareAndSwap(0, time.Now().UnixNano())
				time.Sleep(latency)
			}
		})
	}
	wg.Wait()
	return float64(n) / time.Duration(time.Now().UnixNano()-first.Load()).Seconds()
}
