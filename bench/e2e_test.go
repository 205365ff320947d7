package bench

import (
	"fmt"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkEndToEnd consumes the e2e input (1,000,000 records of 100 bytes on 8 partitions) with a
// raw franz-go poll loop with autocommit, with Tidemark Auto and with Tidemark Tracked (no-op
// handler, default options: one lane, ByPartition, MaxInFlightPerPartition 1024), each in its own
// group on the same cluster. Each is timed from the client's creation (the join included) until
// its group has committed the whole input. The contenders run interleaved, rounds times; the
// medians are reported with the ratios to raw (DESIGN §6; goals: Auto ≥ 0.95, Tracked ≥ 0.9).
//
// Two diagnostics come with them: how many records each client's fetches decoded per record of
// the input (a kgo hook, called once per batch; above 1 means records were fetched again), and a
// fourth contender, Tracked with MaxInFlightPerPartition(16384), which shows what the default
// bound costs (see docs/performance.md). No Observer is set: the runtime runs as by default.
func BenchmarkEndToEnd(b *testing.B) {
	hw := produce(b, e2eInput)
	n := float64(total(hw))
	type contender struct {
		name    string
		rates   []float64
		fetched float64 // records decoded by fetches, over every round
		run     func(fc *fetchCounter) time.Duration
	}
	tidemark := func(prefix string, mode runtime.CommitMode, opts ...runtime.HandleOption) func(*fetchCounter) time.Duration {
		return func(fc *fetchCounter) time.Duration {
			return runApp(b, app{topic: e2eInput.topic, group: newGroup(prefix), mode: mode, handler: noop, opts: opts,
				appOpts: []runtime.Option{runtime.ClientOpts(kgo.WithHooks(fc))}}, hw)
		}
	}
	cs := []*contender{
		{name: "raw", run: func(fc *fetchCounter) time.Duration {
			return runRaw(b, e2eInput.topic, newGroup("raw"), hw, kgo.WithHooks(fc))
		}},
		{name: "auto", run: tidemark("auto", runtime.Auto)},
		{name: "tracked", run: tidemark("tracked", runtime.Tracked)},
		{name: "tracked-16k", run: tidemark("tracked-16k", runtime.Tracked, runtime.MaxInFlightPerPartition(16384))},
	}
	for range b.N {
		for r := range rounds {
			line := fmt.Sprintf("round %d:", r+1)
			for _, c := range cs {
				fc := &fetchCounter{}
				d := c.run(fc)
				c.rates = append(c.rates, n/d.Seconds())
				c.fetched += float64(fc.records.Load())
				line += fmt.Sprintf(" %s %.0f records/s (fetched %.2f per record);", c.name, n/d.Seconds(), float64(fc.records.Load())/n)
			}
			b.Log(line) // one line per round: the testing package keeps only 10 lines of a benchmark's log
		}
	}
	raw := median(cs[0].rates)
	runs := float64(rounds * b.N)
	for _, c := range cs {
		m := median(c.rates)
		b.ReportMetric(m, c.name+"-rec/s")
		if c.name != "raw" {
			b.ReportMetric(m/raw, c.name+"/raw")
		}
		b.ReportMetric(c.fetched/n/runs, c.name+"-fetched/rec")
	}
}
