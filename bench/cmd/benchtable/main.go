package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
)

func main() {
	var inputs []io.Reader
	for _, name := range os.Args[1:] {
		f, err := os.Open(name)
		if err != nil {
			fmt.Fprintln(os.Stderr, "benchtable:", err)
			os.Exit(1)
		}
		defer f.Close()
		inputs = append(inputs, f)
	}
	if len(inputs) == 0 {
		inputs = append(inputs, os.Stdin)
	}
	res, failed, err := parse(io.MultiReader(inputs...))
	if err != nil {
		fmt.Fprintln(os.Stderr, "benchtable:", err)
		os.Exit(1)
	}
	fmt.Println()
	fmt.Println(machine())
	fmt.Println()
	render(os.Stdout, res)
	switch {
	case failed:
		fmt.Fprintln(os.Stderr, "benchtable: a benchmark run failed (see FAIL above)")
		os.Exit(1)
	case len(res) == 0:
		fmt.Fprintln(os.Stderr, "benchtable: no benchmark results")
		os.Exit(1)
	}
}

// results maps a benchmark's name (without the -GOMAXPROCS suffix) to its metrics: unit → the
// values of every run (-count), in order.
type results map[string]map[string][]float64

// parse reads `go test -bench` output. It reports whether a FAIL line was seen.
func parse(r io.Reader) (results, bool, error) {
	res := results{}
	failed := false
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") {
			failed = true
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a log line that starts with a benchmark's name
		}
		name := trimProcs(f[0])
		m := res[name]
		if m == nil {
			m = map[string][]float64{}
			res[name] = m
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				break
			}
			m[f[i+1]] = append(m[f[i+1]], v)
		}
	}
	return res, failed, sc.Err()
}

// trimProcs drops the -GOMAXPROCS suffix the testing package adds to a benchmark's name.
func trimProcs(name string) string {
	i := strings.LastIndexByte(name, '-')
	if i < 0 {
		return name
	}
	if _, err := strconv.Atoi(name[i+1:]); err != nil {
		return name
	}
	return name[:i]
}

// get returns the median of a metric over the runs, and whether it was reported.
func (r results) get(name, unit string) (float64, bool) {
	vs := r[name][unit]
	if len(vs) == 0 {
		return 0, false
	}
	s := slices.Clone(vs)
	slices.Sort(s)
	if len(s)%2 == 1 {
		return s[len(s)/2], true
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2, true
}

// machine describes where the run happened: cores, CPU model, Go version.
func machine() string {
	model := "unknown CPU"
	if raw, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(raw), "\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	load := "unknown"
	if raw, err := os.ReadFile("/proc/loadavg"); err == nil {
		if f := strings.Fields(string(raw)); len(f) >= 3 {
			load = strings.Join(f[:3], " ")
		}
	}
	return fmt.Sprintf("Machine: %d cores (nproc), %s, %s %s/%s; load average after the run: %s.", goruntime.NumCPU(), model,
		goruntime.Version(), goruntime.GOOS, goruntime.GOARCH, load)
}

type row struct {
	section, item, value, against, ratio, goal, status string
}

// ratio prints r with two decimals, or three when two would round a miss up to the goal (least).
func ratio(r, least float64) string {
	if s := fmt.Sprintf("%.2f", r); r >= least || s != fmt.Sprintf("%.2f", least) {
		return s
	}
	return fmt.Sprintf("%.3f", r)
}

// overRaw words a difference from raw's value: "+49 over raw's", "14 under raw's".
func overRaw(d float64) string {
	switch d = math.Round(d); {
	case d < 0:
		return fmt.Sprintf("%.0f under raw's", -d)
	case d == 0:
		return "+0 over raw's" // not "-0"
	}
	return fmt.Sprintf("%+.0f over raw's", d)
}

// verdict says whether ratio meets the goal (ratio ≥ least).
func verdict(ratio, least float64) string {
	if ratio >= least {
		return "met"
	}
	return "**missed**"
}

func render(w io.Writer, r results) {
	var rows []row
	na := func(section, item string) { rows = append(rows, row{section, item, "not run", "", "", "", ""}) }

	// 1. The tracker against the baseline, from the tracker package's own benchmarks.
	for _, b := range []struct{ name, what string }{
		{"BenchmarkDeliverComplete", "deliver + complete, 1 goroutine"},
		{"BenchmarkCompleteParallel", "complete ∥ deliver, GOMAXPROCS goroutines"},
	} {
		tn, ok1 := r.get(b.name+"/tracker", "ns/op")
		bn, ok2 := r.get(b.name+"/mutex-sorted-slice", "ns/op")
		if !ok1 || !ok2 {
			na("1 tracker", b.what)
			continue
		}
		ta, _ := r.get(b.name+"/tracker", "allocs/op")
		ba, _ := r.get(b.name+"/mutex-sorted-slice", "allocs/op")
		rows = append(rows, row{"1 tracker", b.what,
			fmt.Sprintf("%.1f ns/op, %g allocs/op", tn, ta),
			fmt.Sprintf("mutex + sorted slice: %.1f ns/op, %g allocs/op", bn, ba),
			fmt.Sprintf("%.2f× the time (%.1f× faster)", tn/bn, bn/tn), "", ""})
	}

	// 2. End to end.
	const e2e = "BenchmarkEndToEnd"
	if raw, ok := r.get(e2e, "raw-rec/s"); ok {
		// The steady state (first to last record) is the throughput; the run (creation to the
		// committed end, join and autocommit tick included) is shown beside it.
		detail := func(c string) string {
			f, _ := r.get(e2e, c+"-fetched/rec")
			run, _ := r.get(e2e, c+"-run-rec/s")
			s := fmt.Sprintf("run %s", rate(run))
			if c != "raw" {
				rr, _ := r.get(e2e, c+"-run/raw")
				s += fmt.Sprintf(", %.2f of raw's", rr)
			}
			s = fmt.Sprintf("%s; %.2f records fetched per record", s, f)
			if cpu, ok := r.get(e2e, c+"-cpu-ns/rec"); ok {
				s += fmt.Sprintf("; %s ns of CPU per record", count(cpu))
				if rawCPU, ok := r.get(e2e, "raw-cpu-ns/rec"); ok && c != "raw" {
					s += ", " + overRaw(cpu-rawCPU)
				}
			}
			if alloc, ok := r.get(e2e, c+"-alloc-B/rec"); ok {
				s += fmt.Sprintf("; %s bytes allocated per record", count(alloc))
				if rawAlloc, ok := r.get(e2e, "raw-alloc-B/rec"); ok && c != "raw" {
					s += ", " + overRaw(alloc-rawAlloc)
				}
			}
			return s
		}
		auto, _ := r.get(e2e, "auto-rec/s")
		tracked, _ := r.get(e2e, "tracked-rec/s")
		// The bare hand-off (the raw loop handing its polls to one goroutine), when it ran: what
		// this machine allows any runtime that handles records beside its poll loop, as the bare
		// pool is for the I/O-bound cases.
		handOff, hasHandOff := r.get(e2e, "handoff-rec/s")
		ofHandOff := func(got, least float64) string {
			if !hasHandOff {
				return ratio(got/raw, least)
			}
			return fmt.Sprintf("%s (%.2f of the bare hand-off)", ratio(got/raw, least), got/handOff)
		}
		rows = append(rows,
			row{"2 end to end", "raw franz-go poll loop, autocommit", rate(raw) + " (" + detail("raw") + ")", "", "1", "", ""},
			row{"2 end to end", "Tidemark Auto, counting handler", rate(auto) + " (" + detail("auto") + ")", "raw", ofHandOff(auto, 0.95), "≥ 0.95", verdict(auto/raw, 0.95)},
			row{"2 end to end", "Tidemark Tracked, counting handler", rate(tracked) + " (" + detail("tracked") + ")", "raw", ofHandOff(tracked, 0.9), "≥ 0.9", verdict(tracked/raw, 0.9)},
		)
		if hasHandOff {
			rows = append(rows, row{"2 end to end", "diagnostic: bare hand-off, the raw loop handing each poll to one goroutine that reads and counts its records",
				rate(handOff) + " (" + detail("handoff") + ")", "raw", fmt.Sprintf("%.2f", handOff/raw), "", ""})
		}
		if t16, ok := r.get(e2e, "tracked-16k-rec/s"); ok {
			rows = append(rows, row{"2 end to end", "diagnostic: Tracked, MaxInFlightPerPartition(16384)", rate(t16) + " (" + detail("tracked-16k") + ")",
				"raw", fmt.Sprintf("%.2f", t16/raw), "", ""})
		}
	} else {
		na("2 end to end", "raw, Auto, Tracked")
	}

	// 3. I/O-bound handlers.
	for _, c := range []struct{ name, what string }{
		{"ByPartition-1ms", "1 ms, 16 partitions, 16 lanes, ByPartition"},
		{"ByPartition-10ms", "10 ms, 16 partitions, 16 lanes, ByPartition"},
		{"ByKey-10ms", "10 ms, 8 partitions, 1,024 keys, 1,024 lanes, ByKey"},
		{"Unordered-10ms", "10 ms, 8 partitions, 4,096 lanes, Unordered"},
	} {
		name := "BenchmarkIOBound/" + c.name
		got, ok := r.get(name, "rec/s")
		if !ok {
			na("3 I/O-bound", c.what)
			continue
		}
		ideal, _ := r.get(name, "ideal-rec/s")
		bare, _ := r.get(name, "bare-rec/s")
		ms, _ := r.get(name, "handler-ms")
		fetched, _ := r.get(name, "fetched/rec")
		pauses, _ := r.get(name, "pauses")
		rows = append(rows, row{"3 I/O-bound", c.what,
			fmt.Sprintf("%s (handler mean %.2f ms; %.2f records fetched per record, %s pauses)", rate(got), ms, fetched, count(pauses)),
			fmt.Sprintf("ideal %s; bare pool %s (%.2f)", rate(ideal), rate(bare), bare/ideal),
			fmt.Sprintf("%s (%.2f of the bare pool)", ratio(got/ideal, 0.9), got/bare), "≥ 0.9", verdict(got/ideal, 0.9)})
	}

	// 4. Transactional against Tracked.
	const txn = "BenchmarkTransactional"
	if tr, ok := r.get(txn, "tracked-rec/s"); ok {
		tx, _ := r.get(txn, "txn-rec/s")
		rows = append(rows, row{"4 Transactional", "100 ms windows, no-op handler, 1 lane", rate(tx),
			"Tracked: " + rate(tr), ratio(tx/tr, 0.5), "≥ 0.5", verdict(tx/tr, 0.5)})
	} else {
		na("4 Transactional", "Transactional vs Tracked")
	}

	// 5. Memory of the consumer process.
	mem := func(c string) (float64, float64, bool) {
		p, ok := r.get("BenchmarkMemory/"+c, "peak-rss-MiB")
		h, _ := r.get("BenchmarkMemory/"+c, "held-records")
		return p, h, ok
	}
	if p, _, ok := mem("idle"); ok {
		rows = append(rows, row{"5 memory", "idle consumer, empty topic", fmt.Sprintf("%.1f MiB peak RSS", p), "", "", "", ""})
	}
	for _, kind := range []struct{ name, what string }{
		{"blocked", "handler blocked"},
		{"slow", "handler 1 ms, 8 lanes"},
	} {
		small, sh, ok1 := mem(kind.name + "-250k")
		large, lh, ok2 := mem(kind.name + "-1M")
		if !ok1 || !ok2 {
			na("5 memory", kind.what)
			continue
		}
		sb, _ := r.get("BenchmarkMemory/"+kind.name+"-250k", "backlog-records")
		lb, _ := r.get("BenchmarkMemory/"+kind.name+"-1M", "backlog-records")
		extra := (lb - sb) * recordSize / (1 << 20) // MiB of values the larger backlog adds
		growth := (large - small) / extra
		rows = append(rows,
			row{"5 memory", fmt.Sprintf("%s, %s-record backlog", kind.what, count(sb)), fmt.Sprintf("%.1f MiB peak RSS (%s held)", small, count(sh)), "", "", "", ""},
			row{"5 memory", fmt.Sprintf("%s, %s-record backlog", kind.what, count(lb)), fmt.Sprintf("%.1f MiB peak RSS (%s held)", large, count(lh)),
				fmt.Sprintf("%s backlog: %.1f MiB", count(sb), small),
				fmt.Sprintf("%+.1f MiB for %.1f MiB more backlog (%+.2f)", large-small, extra, growth),
				"flat: ≤ 0.1 MiB per MiB of backlog", verdictMax(growth, 0.1)},
		)
	}

	fmt.Fprintln(w, "| # | Case | Result | Compared with | Ratio | Goal | |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	met, goals := 0, 0
	for _, x := range rows {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s |\n", x.section, x.item, x.value, x.against, x.ratio, x.goal, x.status)
		if x.goal != "" {
			goals++
			if x.status == "met" {
				met++
			}
		}
	}
	fmt.Fprintf(w, "\nGoals met: %d of %d.\n", met, goals)
}

// recordSize is the size of the benchmarks' record values, in bytes.
const recordSize = 100

// verdictMax says whether ratio stays within most.
func verdictMax(ratio, most float64) string {
	if ratio <= most {
		return "met"
	}
	return "**missed**"
}

// rate formats records/s with thousands separators.
func rate(v float64) string { return count(v) + " rec/s" }

// count formats a count with thousands separators.
func count(v float64) string {
	s := strconv.FormatInt(int64(v+0.5), 10)
	var b strings.Builder
	for i, c := range s {
		if i > 0 && (len(s)-i)%3 == 0 {
			b.WriteByte(',')
		}
		b.WriteRune(c)
	}
	return b.String()
}
