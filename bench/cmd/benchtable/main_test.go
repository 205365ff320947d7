package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
BenchmarkDeliverComplete/tracker-2         	12345	        10.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkDeliverComplete/tracker-2         	12345	        12.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkDeliverComplete/tracker-2         	12345	        30.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkDeliverComplete/mutex-sorted-slice-2 	12345	        40.00 ns/op	       0 B/op	       0 allocs/op
BenchmarkEndToEnd-2   	       1	21212046940 ns/op	    300000 auto-rec/s	   240000 auto-run-rec/s	 0.3 auto-run/raw	   1000000 raw-rec/s	   800000 raw-run-rec/s	    250000 tracked-rec/s	 5.5 tracked-fetched/rec	 1100 raw-cpu-ns/rec	 1450 auto-cpu-ns/rec	 900 raw-alloc-B/rec	 930 auto-alloc-B/rec
--- BENCH: BenchmarkEndToEnd-2
    e2e_test.go:26: round 1: raw 1654314, auto 277272, tracked 344561 records/s
BenchmarkMemory/blocked-250k-2 	       1	2320740205 ns/op	    250000 backlog-records	     12000 held-records	        36.00 peak-rss-MiB
BenchmarkMemory/blocked-1M-2   	       1	3271221329 ns/op	   1000000 backlog-records	     12000 held-records	        37.00 peak-rss-MiB
PASS
ok  	github.com/tidemark-io/tidemark/bench	21.253s
`

func TestParseAndRender(t *testing.T) {
	res, failed, err := parse(strings.NewReader(sample))
	if err != nil || failed {
		t.Fatalf("parse: %v, failed %v", err, failed)
	}
	if v, _ := res.get("BenchmarkDeliverComplete/tracker", "ns/op"); v != 12 {
		t.Errorf("median ns/op = %v, want 12", v)
	}
	if v, _ := res.get("BenchmarkDeliverComplete/mutex-sorted-slice", "ns/op"); v != 40 {
		t.Errorf("baseline ns/op = %v, want 40", v)
	}
	requireRows(t, res,
		"| 1 tracker | deliver + complete, 1 goroutine | 12.0 ns/op, 0 allocs/op | mutex + sorted slice: 40.0 ns/op, 0 allocs/op | 0.30× the time (3.3× faster)",
		"| 2 end to end | raw franz-go poll loop, autocommit | 1,000,000 rec/s (run 800,000 rec/s; 0.00 records fetched per record; 1,100 ns of CPU per record; 900 bytes allocated per record) |",
		"| 2 end to end | Tidemark Auto, counting handler | 300,000 rec/s (run 240,000 rec/s, 0.30 of raw's; 0.00 records fetched per record; 1,450 ns of CPU per record, +350 over raw's; 930 bytes allocated per record, +30 over raw's) | raw | 0.30 | ≥ 0.95 | **missed** |",
		"| 2 end to end | Tidemark Tracked, counting handler | 250,000 rec/s (run 0 rec/s, 0.00 of raw's; 5.50 records fetched per record) | raw | 0.25 | ≥ 0.9 | **missed** |",
		"| 5 memory | handler blocked, 1,000,000-record backlog | 37.0 MiB peak RSS (12,000 held) | 250,000 backlog: 36.0 MiB | +1.0 MiB for 71.5 MiB more backlog (+0.01) | flat: ≤ 0.1 MiB per MiB of backlog | met |",
		"| 3 I/O-bound | 1 ms, 16 partitions, 16 lanes, ByPartition | not run |",
		"Goals met: 1 of 3.",
	)
}

// requireRows renders res and fails t for each of wants the table lacks.
func requireRows(t *testing.T, res results, wants ...string) {
	t.Helper()
	var b strings.Builder
	render(&b, res)
	out := b.String()
	for _, want := range wants {
		if !strings.Contains(out, want) {
			t.Errorf("table lacks %q:\n%s", want, out)
		}
	}
}

func TestParseSeesFailures(t *testing.T) {
	_, failed, _ := parse(strings.NewReader("--- FAIL: BenchmarkX\nFAIL\tgithub.com/x\t1s\n"))
	if !failed {
		t.Error("a FAIL line was not noticed")
	}
}

// A miss that two decimals would round up to its goal is printed with three.
func TestRatioShowsAMissThatRoundsToTheGoal(t *testing.T) {
	for _, c := range []struct {
		r, least float64
		want     string
	}{{0.9486, 0.95, "0.949"}, {0.95, 0.95, "0.95"}, {0.9512, 0.95, "0.95"}, {0.8816, 0.9, "0.88"}, {0.8996, 0.9, "0.900"}} {
		if got := ratio(c.r, c.least); got != c.want {
			t.Errorf("ratio(%v, %v) = %q, want %q", c.r, c.least, got, c.want)
		}
	}
}

func TestCount(t *testing.T) {
	for in, want := range map[float64]string{0: "0", 999: "999", 1000: "1,000", 1234567.4: "1,234,567"} {
		if got := count(in); got != want {
			t.Errorf("count(%v) = %q, want %q", in, got, want)
		}
	}
}

// With the bare hand-off in the run, Auto and Tracked are shown as a fraction of it too, and it
// has a diagnostic row of its own.
func TestHandOffRow(t *testing.T) {
	in := strings.Replace(sample, "250000 tracked-rec/s", "250000 tracked-rec/s\t 500000 handoff-rec/s", 1)
	res, _, err := parse(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	requireRows(t, res,
		"| raw | 0.30 (0.60 of the bare hand-off) | ≥ 0.95 | **missed** |",
		"| raw | 0.25 (0.50 of the bare hand-off) | ≥ 0.9 | **missed** |",
		"| 2 end to end | diagnostic: bare hand-off, the raw loop handing each poll to one goroutine that reads and counts its records | 500,000 rec/s (run 0 rec/s, 0.00 of raw's; 0.00 records fetched per record) | raw | 0.50 |",
	)
}

func TestOverRaw(t *testing.T) {
	for in, want := range map[float64]string{49.4: "+49 over raw's", 0: "+0 over raw's", -0.3: "+0 over raw's", -14: "14 under raw's"} {
		if got := overRaw(in); got != want {
			t.Errorf("overRaw(%v) = %q, want %q", in, got, want)
		}
	}
}
