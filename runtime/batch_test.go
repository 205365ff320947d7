package runtime_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
)

// batches records each batch handler call's values, safely from many lanes.
type batches struct {
	mu sync.Mutex
	bs [][]string
}

func (b *batches) add(ds []*runtime.Delivery) {
	b.mu.Lock()
	defer b.mu.Unlock()
	var vs []string
	for _, d := range ds {
		vs = append(vs, string(d.Record().Value))
	}
	b.bs = append(b.bs, vs)
}

func (b *batches) all() [][]string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return slices.Clone(b.bs)
}

func (b *batches) flat() []string {
	var out []string
	for _, vs := range b.all() {
		out = append(out, vs...)
	}
	return out
}

func values(prefix string, n int) []string {
	vs := make([]string, n)
	for i := range vs {
		vs[i] = fmt.Sprintf("%s%02d", prefix, i)
	}
	return vs
}

// A lane takes the head and what is already queued behind it, at most n (DESIGN §3.5): five
// records queued at once with n = 2 are handled as batches of 2, 2 and 1, in order, each once.
func TestBatchesAreCutFromWhatIsQueued(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, values("r", 5)...)
	var got batches
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 2,
		runtime.BatchAll(func(_ context.Context, ds []*runtime.Delivery) error { got.add(ds); return nil }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5})
	require.Equal(t, [][]string{{"r00", "r01"}, {"r02", "r03"}, {"r04"}}, got.all())
}

// Twelve records in batches of at most 5: each handled once, in order, committed 12.
func TestBatchesKeepPartitionOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, values("r", 12)...)
	var got batches
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 5,
		runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
			got.add(ds)
			return make([]error, len(ds))
		}), runtime.Workers(3))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 12})
	require.Equal(t, values("r", 12), got.flat())
	for _, b := range got.all() {
		require.LessOrEqual(t, len(b), 5)
	}
}

// Element i's error settles element i: ack, drop, retry once, ack; the retried element is handled
// twice and the position waits for it; a short result retries the uncovered elements (DESIGN §3.5).
func TestBatchPerElementOutcomes(t *testing.T) {
	cases := []struct {
		name    string
		results func(first bool) []error
		want    []string
	}{
		{"ack, drop, retry once, ack", func(first bool) []error {
			if first {
				return []error{nil, runtime.Drop(errors.New("no")), runtime.Retry(errors.New("again")), nil}
			}
			return []error{nil}
		}, []string{"r00", "r01", "r02", "r03", "r02"}},
		{"a short result retries the rest", func(first bool) []error {
			if first {
				return []error{nil, nil}
			}
			return []error{nil, nil}
		}, []string{"r00", "r01", "r02", "r03", "r02", "r03"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, values("r", 4)...)
			var got batches
			first := true
			app := runtime.New(appOpts(c)...)
			runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 4,
				runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
					got.add(ds)
					r := tc.results(first)
					first = false
					return r
				}), fastBackoff)
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 4})
			require.Equal(t, tc.want, got.flat())
		})
	}
}

// Under Auto, the acked elements behind one that runs again in place (its dead letter was not
// produced) are marked once it is done, also when it runs again more than once: r01 and r05 are
// dropped, the first three dead letters fail, and the input is committed to its end while the App
// runs, not only by a Shutdown (helper-109: Auto stayed at 2, and the acked r02–r07 were handled
// again after a graceful restart). Under ByPartition the batches are exact: r01 and r05 run again
// together, then r01 alone.
func TestAutoBatchMarksTheElementsBehindAnInPlaceRetry(t *testing.T) {
	for _, o := range []runtime.Ordering{runtime.ByPartition, runtime.Unordered} {
		t.Run(o.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
			c.ProduceValues(t, "in", 0, values("r", 8)...)
			fault := c.FailProduce("dlq", 3, kerr.InvalidRecord)
			var got batches
			app := runtime.New(appOpts(c)...)
			runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Auto), 8,
				runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
					got.add(ds)
					out := make([]error, len(ds))
					for i, d := range ds {
						if v := string(d.Record().Value); v == "r01" || v == "r05" {
							out[i] = runtime.Drop(errors.New("poison"))
						}
					}
					return out
				}), runtime.DeadLetter("dlq"), o, fastBackoff)
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 8})
			require.Equal(t, 3, fault.Hits())
			stop(t, app)
			require.Equal(t, map[int32]int64{0: 8}, c.Committed(t, "g", "in"))
			var dead []string
			for _, r := range c.ReadAll(t, "dlq", true) {
				dead = append(dead, string(r.Value))
			}
			require.ElementsMatch(t, []string{"r01", "r05"}, dead)
			if o == runtime.ByPartition {
				require.Equal(t, [][]string{values("r", 8), {"r01", "r05"}, {"r01"}}, got.all())
				return
			}
			flat := got.flat() // the three failures fall on r01 and r05 in some order
			require.Len(t, flat, 8+3)
			runs := map[string]int{}
			for _, v := range flat {
				runs[v]++
			}
			require.Equal(t, 5, runs["r01"]+runs["r05"])
		})
	}
}

// Under Unordered a batch may span partitions, and every partition it drew from is settled. Its
// ctx is its own, and ends once it has returned, saying so; a one-partition batch's ctx, its
// partition's, stays live (helper-125: the spanning batch's ended as plain context.Canceled).
func TestUnorderedBatchSpansPartitions(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 3))
	for p := range int32(3) {
		c.ProduceValues(t, "in", p, values(fmt.Sprintf("p%d-", p), 3)...)
	}
	var got batches
	var mu sync.Mutex
	var ctxs []context.Context // one per batch, in got's order
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 4,
		runtime.BatchAll(func(ctx context.Context, ds []*runtime.Delivery) error {
			mu.Lock()
			defer mu.Unlock()
			got.add(ds)
			ctxs = append(ctxs, ctx)
			return nil
		}), runtime.Unordered)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3, 1: 3, 2: 3})
	all := got.flat()
	slices.Sort(all)
	require.Len(t, all, 9, "each record once")
	spanned, single := 0, 0
	mu.Lock()
	defer mu.Unlock()
	for i, b := range got.all() {
		parts := map[byte]bool{}
		for _, v := range b {
			parts[v[1]] = true
		}
		if len(parts) == 1 {
			single++
			require.NoError(t, ctxs[i].Err(), "batch %v: its partition's ctx, live after it returned", b)
			continue
		}
		spanned++
		select {
		case <-ctxs[i].Done():
		case <-time.After(kfaketest.WaitTimeout):
			t.Fatalf("batch %v: its ctx never ended", b)
		}
		require.EqualError(t, context.Cause(ctxs[i]), "tidemark: the batch spanning partitions has returned", "batch %v", b)
	}
	require.Positive(t, spanned, "some batch drew from more than one partition: %v", got.all())
	require.Positive(t, single, "some batch drew from one partition: %v", got.all())
}

// Workers(4) with batches of at most 6 over 20 records: every record exactly once, no batch
// larger than 6.
func TestParallelBatchesHandleEachRecordOnce(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 4))
	var all []string
	for p := range int32(4) {
		vs := values(fmt.Sprintf("p%d-", p), 5)
		c.ProduceValues(t, "in", p, vs...)
		all = append(all, vs...)
	}
	var got batches
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 6,
		runtime.BatchAll(func(_ context.Context, ds []*runtime.Delivery) error { got.add(ds); return nil }), runtime.Workers(4))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5, 1: 5, 2: 5, 3: 5})
	flat := got.flat()
	slices.Sort(flat)
	require.Equal(t, all, flat)
	for _, b := range got.all() {
		require.LessOrEqual(t, len(b), 6)
	}
}

type line struct {
	Amount int `json:"amount"`
}

// JSONBatch decodes each element; an element that does not decode is dropped and the others are
// handled (DESIGN §3.5, §3.8).
func TestJSONBatchDropsUndecodableElements(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, `{"amount":1}`, `{"amount":`, `{"amount":3}`)
	var mu sync.Mutex
	var sums []int
	app := runtime.New(appOpts(c)...)
	runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 10,
		runtime.JSONBatch(func(_ context.Context, ls []line) []error {
			mu.Lock()
			defer mu.Unlock()
			for _, l := range ls {
				sums = append(sums, l.Amount)
			}
			return make([]error, len(ls))
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []int{1, 3}, sums)
}

// A result of the wrong length is logged once per batch, with how many elements it retried and
// how many entries it ignored, from a BatchHandler and from JSONBatch's fn alike (whose result
// covers only the values that decoded); the uncovered elements are handled again, the extra
// entries change nothing (DESIGN §3.5).
func TestBatchResultOfTheWrongLengthIsLogged(t *testing.T) {
	const msg = "tidemark: batch handler returned a result of the wrong length"
	ok := func(n int) []error { return make([]error, n) }
	cases := []struct {
		name            string
		in              []string
		json            bool
		first           int // results the first call returns; later calls return one per element
		retried, ignore int
		want            []string // handled values, in order
	}{
		{"BatchHandler short", values("r", 4), false, 2, 2, 0, []string{"r00", "r01", "r02", "r03", "r02", "r03"}},
		{"BatchHandler long", values("r", 4), false, 6, 0, 2, []string{"r00", "r01", "r02", "r03"}},
		{"JSONBatch short", []string{`{"amount":1}`, `bad`, `{"amount":3}`, `{"amount":4}`}, true, 1, 2, 0,
			[]string{"1", "3", "4", "3", "4"}},
		{"JSONBatch long", []string{`{"amount":1}`, `bad`, `{"amount":3}`, `{"amount":4}`}, true, 5, 0, 2,
			[]string{"1", "3", "4"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, tc.in...)
			var (
				out     lockedBuffer
				mu      sync.Mutex
				handled []string
				calls   int
			)
			result := func(n int) []error { // under mu
				calls++
				if calls == 1 {
					return ok(tc.first)
				}
				return ok(n)
			}
			h := runtime.BatchHandler(runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
				mu.Lock()
				defer mu.Unlock()
				for _, d := range ds {
					handled = append(handled, string(d.Record().Value))
				}
				return result(len(ds))
			}))
			if tc.json {
				h = runtime.JSONBatch(func(_ context.Context, ls []line) []error {
					mu.Lock()
					defer mu.Unlock()
					for _, l := range ls {
						handled = append(handled, fmt.Sprint(l.Amount))
					}
					return result(len(ls))
				})
			}
			app := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&out, nil))))...)
			runtime.HandleBatch(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked), 4, h, fastBackoff)
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 4})
			stop(t, app)

			mu.Lock()
			require.Equal(t, tc.want, handled)
			mu.Unlock()
			var lines []map[string]any
			for l := range strings.Lines(out.String()) {
				if strings.Contains(l, msg) {
					var attrs map[string]any
					require.NoError(t, json.Unmarshal([]byte(l), &attrs))
					lines = append(lines, attrs)
				}
			}
			require.Len(t, lines, 1, "the log:\n%s", out.String())
			require.Equal(t, "WARN", lines[0]["level"])
			require.Equal(t, float64(4), lines[0]["batch"])
			require.Equal(t, float64(tc.retried), lines[0]["retried"])
			require.Equal(t, float64(tc.ignore), lines[0]["ignored"])
			require.Equal(t, "in", lines[0]["topic"])
			require.Equal(t, float64(0), lines[0]["offset"])
		})
	}
}
