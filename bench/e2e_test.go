package bench

import (
	"fmt"
	goruntime "runtime"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/cputime"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkEndToEnd consumes the e2e input (1,000,000 records of 100 bytes on 8 partitions) with a
// raw franz-go poll loop with autocommit, with Tidemark Auto and with Tidemark Tracked (a handler
// that only counts, default options: one lane, ByPartition, MaxInFlightPerPartition 1024), each in
// its own group on the same cluster. The contenders run interleaved, rounds times; the medians are
// reported with the ratios to raw (DESIGN §6; goals: Auto ≥ 0.95, Tracked ≥ 0.9).
//
// Each run has two clocks. The throughput (rec/s, and the ratios) is the steady state: from the
// first record the poll loop or the handler sees to the last record of the input; raw counts in
// its poll loop what Tidemark's handler counts, one atomic add per record. The run (run-rec/s) is
// timed from the client's creation (the join included) until the group has committed the whole
// input: it adds the join and the wait for the next autocommit tick (AutoCommitInterval, 100 ms in
// kfaketest.FastOpts), so on this 1M-record input it moves in steps of about 0.2 of raw.
//
// Three diagnostics come with them: how many records each client's fetches decoded per record of
// the input (a kgo hook, called once per batch; above 1 means records were fetched again), the
// tail of each round (logged: from the last batch the client read to the last record counted,
// what handling the last fetch adds after it arrived), and two more contenders: Tracked with
// MaxInFlightPerPartition(16384), which shows what the default bound costs, and a bare hand-off,
// the raw poll loop handing each poll to one goroutine that reads each record's offset and
// counts it: the least any runtime that handles records beside its poll loop does, no Tidemark
// in it (see docs/performance.md). No Observer is set: the runtime runs as by default.
//
// Beside the rates, each contender's CPU per record (cpu-ns/rec, the median over the rounds): the
// process's CPU time (user + system, getrusage) from the contender's start to its shutdown,
// divided by the input. The cluster runs in this process, so every contender pays for serving its
// fetches too; the difference from raw is what Tidemark's own work costs, whatever the sharing of
// the cores did to the rates. Likewise the bytes allocated per record (alloc-B/rec: the process's
// runtime.MemStats.TotalAlloc over the run, divided by the input), the cluster's included.
func BenchmarkEndToEnd(b *testing.B) {
	hw := produce(b, e2eInput)
	n := total(hw)
	type contender struct {
		name     string
		rates    []float64 // steady state
		runRates []float64 // creation to committed
		fetched  float64   // records decoded by fetches, over every round
		cpu      []float64 // CPU ns per record, per round
		alloc    []float64 // bytes allocated per record, per round
		run      func(fc *fetchCounter, clk *clock) time.Duration
	}
	tidemark := func(prefix string, mode runtime.CommitMode, opts ...runtime.HandleOption) func(*fetchCounter, *clock) time.Duration {
		return func(fc *fetchCounter, clk *clock) time.Duration {
			return runApp(b, app{topic: e2eInput.topic, group: newGroup(prefix), mode: mode, handler: clk.handler(), opts: opts,
				appOpts: []runtime.Option{runtime.ClientOpts(kgo.WithHooks(fc))}}, hw)
		}
	}
	cs := []*contender{
		{name: "raw", run: func(fc *fetchCounter, clk *clock) time.Duration {
			return runRaw(b, e2eInput.topic, newGroup("raw"), hw, clk, false, kgo.WithHooks(fc))
		}},
		{name: "handoff", run: func(fc *fetchCounter, clk *clock) time.Duration {
			return runRaw(b, e2eInput.topic, newGroup("handoff"), hw, clk, true, kgo.WithHooks(fc))
		}},
		{name: "auto", run: tidemark("auto", runtime.Auto)},
		{name: "tracked", run: tidemark("tracked", runtime.Tracked)},
		{name: "tracked-16k", run: tidemark("tracked-16k", runtime.Tracked, runtime.MaxInFlightPerPartition(16384))},
	}
	for range b.N {
		for r := range rounds {
			line := fmt.Sprintf("round %d:", r+1)
			for _, c := range cs {
				fc, clk := &fetchCounter{}, &clock{want: n}
				var ms goruntime.MemStats
				goruntime.ReadMemStats(&ms)
				alloc0 := ms.TotalAlloc
				cpu0, cpuOK := cputime.Process()
				d := c.run(fc, clk)
				if cpu1, ok := cputime.Process(); ok && cpuOK {
					c.cpu = append(c.cpu, float64(cpu1-cpu0)/float64(n))
				}
				goruntime.ReadMemStats(&ms)
				c.alloc = append(c.alloc, float64(ms.TotalAlloc-alloc0)/float64(n))
				consumed := clk.consumed()
				if consumed <= 0 {
					b.Fatalf("%s: the clock saw %d of %d records", c.name, clk.n.Load(), n)
				}
				rate, runRate := float64(n)/consumed.Seconds(), float64(n)/d.Seconds()
				c.rates = append(c.rates, rate)
				c.runRates = append(c.runRates, runRate)
				c.fetched += float64(fc.records.Load())
				line += fmt.Sprintf(" %s %.0f records/s (run %.0f, fetched %.2f per record", c.name, rate, runRate, float64(fc.records.Load())/float64(n))
				if len(c.cpu) > r {
					line += fmt.Sprintf(", %.0f ns CPU per record", c.cpu[r])
				}
				line += fmt.Sprintf(", %.0f bytes allocated per record", c.alloc[r])
				line += fmt.Sprintf(", tail %.1f ms", float64(clk.last.Load()-fc.lastAt.Load())/1e6)
				line += ");"
			}
			b.Log(line) // one line per round: the testing package keeps only 10 lines of a benchmark's log
		}
	}
	raw, rawRun := median(cs[0].rates), median(cs[0].runRates)
	runs := float64(rounds * b.N)
	for _, c := range cs {
		m, mr := median(c.rates), median(c.runRates)
		b.ReportMetric(m, c.name+"-rec/s")
		b.ReportMetric(mr, c.name+"-run-rec/s")
		if c.name != "raw" {
			b.ReportMetric(m/raw, c.name+"/raw")
			b.ReportMetric(mr/rawRun, c.name+"-run/raw")
		}
		b.ReportMetric(c.fetched/float64(n)/runs, c.name+"-fetched/rec")
		if len(c.cpu) > 0 {
			b.ReportMetric(median(c.cpu), c.name+"-cpu-ns/rec")
		}
		b.ReportMetric(median(c.alloc), c.name+"-alloc-B/rec")
	}
}
