package main

import (
	"bytes"
	"context"
	"encoding/json"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/twmb/franz-go/pkg/kgo"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// The dead-letter headers the test reads (DESIGN §3.3).
const (
	dlqAttemptsHeader = "x-tidemark-dlq-attempts"
	dlqErrorHeader    = "x-tidemark-dlq-error"
	dlqOffsetHeader   = "x-tidemark-dlq-offset"
)

// expected is what the bundled input must come to, computed from the input files and the seeded
// failure functions, without the runtime.
type expected struct {
	subs    map[string]SubSummary // by name: Input and Counts
	replies map[string]Paid       // by payout id: one per payout the bank pays
	dead    map[string]string     // dead-letter records by value: "malformed", "zero" or "spent"
	deadN   map[string]int        // how many of each value (malformed lines repeat)
	effects Effects
	copies  int64 // retry copies pay_out appends to the payouts topic
}

// expect computes the expected outcome of every input line: a line that does not decode into its
// type is malformed; a zero payout is dropped; a payout is paid after bankFailures(id) failed calls,
// or spent when those reach maxAttempts; a page view is lost when storeFails(id); an empty
// statement line is dropped.
func expect(t *testing.T) expected {
	t.Helper()
	e := expected{subs: map[string]SubSummary{}, replies: map[string]Paid{}, dead: map[string]string{},
		deadN: map[string]int{}}
	lines := func(file string) [][]byte {
		ls, err := readLines(file)
		require.NoError(t, err)
		return ls
	}
	var pay, view, rec SubSummary
	pages, statements := map[string]bool{}, map[string]bool{}
	for _, l := range lines("payouts.jsonl.gz") {
		pay.Input++
		var p Payout
		err := json.Unmarshal(l, &p)
		f := bankFailures(p.ID)
		switch {
		case err != nil:
			pay.Malformed++
			e.dead[string(l)] = "malformed"
		case p.AmountCents == 0:
			pay.Dropped++
			e.dead[string(l)] = "zero"
		case f >= maxAttempts:
			pay.Spent++
			e.copies += maxAttempts - 1
			e.effects.BankCalls += maxAttempts
			e.dead[string(l)] = "spent"
		default:
			pay.Acked++
			e.copies += int64(f)
			e.effects.BankCalls += int64(f + 1)
			e.effects.Payouts++
			e.effects.PaidCents += p.AmountCents
			e.replies[p.ID] = Paid{PayoutID: p.ID, AmountCents: p.AmountCents, Calls: f + 1}
		}
	}
	for v := range e.dead {
		e.deadN[v] = 0
	}
	for _, l := range lines("payouts.jsonl.gz") {
		if _, ok := e.dead[string(l)]; ok {
			e.deadN[string(l)]++
		}
	}
	pay.Retried = e.copies
	pay.Handled = pay.Input + e.copies
	pay.DeadLettered = pay.Malformed + pay.Dropped + pay.Spent
	for _, l := range lines("page-views.jsonl.gz") {
		view.Input++
		var v PageView
		switch {
		case json.Unmarshal(l, &v) != nil:
			view.Malformed++
		case storeFails(v.ID):
			view.Lost++
		default:
			view.Acked++
			pages[v.Page] = true
		}
	}
	view.Handled = view.Input
	for _, l := range lines("statements.jsonl.gz") {
		rec.Input++
		var s StatementLine
		switch {
		case json.Unmarshal(l, &s) != nil:
			rec.Malformed++
		case s.Payout == "" && s.AmountCents == 0:
			rec.Dropped++
		default:
			rec.Acked++
			statements[s.Statement] = true
			e.effects.LedgerCents += s.AmountCents
		}
	}
	rec.Handled = rec.Input
	for name, s := range map[string]*SubSummary{"pay_out": &pay, "count_view": &view, "reconcile": &rec} {
		s.Records = s.Input
		e.subs[name] = *s
	}
	e.effects.Views, e.effects.Pages = view.Acked, len(pages)
	e.effects.Lines, e.effects.Statements = rec.Acked, len(statements)
	return e
}

// The demo, run in-process on its own cluster, settles every input record as the input and the
// seeded failures say, number by number: a payout the bank fails a few times is paid in the end
// (Tracked, retry copies) with exactly one reply; one whose five attempts fail, a zero payout and a
// malformed line each reach the dead-letter topic once; a page view the store fails is lost (Auto);
// an empty statement line is dropped; and every group's committed offsets equal the high
// watermarks of its topic.
func TestDemoSettlesTheBundledInputExactly(t *testing.T) {
	want := expect(t)
	c := kfaketest.New(t, func() []kfaketest.Option {
		var opts []kfaketest.Option
		for _, tp := range topics {
			opts = append(opts, kfaketest.Topic(tp.name, tp.partitions))
		}
		return opts
	}()...)
	var out bytes.Buffer
	sum, err := run(context.Background(), config{timeout: 90 * time.Second, workers: 8, cluster: c}, &out)
	require.NoError(t, err, out.String())
	require.True(t, sum.Complete)
	t.Logf("\n%s", out.String())

	// Per subscription: the input, and what each record came to.
	for _, s := range sum.Subs {
		w := want.subs[s.Name]
		require.Equal(t, w.Input, s.Input, "%s: input", s.Name)
		require.Equal(t, w.Counts, s.Counts, "%s: counts", s.Name)
	}
	for _, s := range sum.Subs {
		require.Equal(t, s.Input, s.Acked+s.Dropped+s.Malformed+s.Spent+s.Lost,
			"%s: every input record is acked, dropped, malformed, spent or lost, once", s.Name)
	}
	require.Greater(t, want.subs["pay_out"].Spent, int64(0), "the input spends some payouts")
	require.Greater(t, want.subs["count_view"].Lost, int64(0), "the input loses some page views")

	// Lag 0 everywhere: committed = high watermark on every partition, as the cluster says too.
	for _, s := range sum.Subs {
		hw := c.HighWatermarks(t, s.Topic)
		require.Equal(t, hw, c.Committed(t, s.Group, s.Topic), "%s: committed offsets", s.Group)
		require.Len(t, s.Partitions, len(hw))
		for _, p := range s.Partitions {
			require.Equal(t, hw[p.Partition], p.HighWatermark, "%s[%d]", s.Topic, p.Partition)
			require.Equal(t, p.HighWatermark, p.Committed, "%s[%d]", s.Topic, p.Partition)
		}
	}
	var payoutsEnd int64
	for _, o := range c.HighWatermarks(t, "payouts") {
		payoutsEnd += o
	}
	require.Equal(t, want.subs["pay_out"].Input+want.copies, payoutsEnd, "the payouts topic: the input and its retry copies")

	// Exactly one reply per paid payout, keyed by its id.
	replies := c.ReadAll(t, "payouts.done", true)
	got := map[string]Paid{}
	for _, r := range replies {
		var p Paid
		require.NoError(t, json.Unmarshal(r.Value, &p))
		require.Equal(t, p.PayoutID, string(r.Key))
		_, dup := got[p.PayoutID]
		require.False(t, dup, "a second reply for %s", p.PayoutID)
		got[p.PayoutID] = p
	}
	require.Equal(t, want.replies, got)

	// The dead-letter topic holds each spent, zero and malformed payout once, byte for byte.
	dead := c.ReadAll(t, "payouts.dlq", true)
	seen := map[string]int{}
	for _, r := range dead {
		why, ok := want.dead[string(r.Value)]
		require.True(t, ok, "unexpected dead letter %q", r.Value)
		seen[string(r.Value)]++
		attempts, errText := header(r, dlqAttemptsHeader), header(r, dlqErrorHeader)
		switch why {
		case "spent":
			require.Equal(t, strconv.Itoa(maxAttempts), attempts, "%q", r.Value)
			require.Contains(t, errText, errBankUnavailable.Error())
		case "zero":
			require.Equal(t, "1", attempts, "%q", r.Value)
			require.Contains(t, errText, errZeroAmount.Error())
		case "malformed":
			require.Equal(t, "1", attempts, "%q", r.Value)
			require.Contains(t, errText, "could not be decoded")
		}
		require.NotEmpty(t, header(r, dlqOffsetHeader))
	}
	require.Equal(t, want.deadN, seen, "dead letters by value")
	require.Equal(t, []Output{{"payouts.done", int64(len(want.replies))}, {"payouts.dlq", int64(len(dead))}}, sum.Outputs)

	// What the handlers did.
	require.Equal(t, want.effects, sum.Effects)

	// The printed summary.
	text := out.String()
	for _, s := range []string{"subscription mode", "dead-lettered", "pay_out", "count_view", "reconcile",
		"committed offset / high watermark", "records/s"} {
		require.Contains(t, text, s)
	}
	require.False(t, strings.Contains(text, "\r"), "no progress line when stdout is not a terminal")
	require.True(t, slices.ContainsFunc(strings.Split(text, "\n"), func(l string) bool {
		return strings.HasPrefix(l, "pay_out ") && strings.Contains(l, strconv.FormatInt(want.subs["pay_out"].Acked, 10))
	}))
}

// header returns r's header key, or "".
func header(r *kgo.Record, key string) string {
	for _, h := range r.Headers {
		if h.Key == key {
			return string(h.Value)
		}
	}
	return ""
}

// A -timeout that is not positive is refused before anything starts, with an error naming it.
func TestDemoRefusesANonPositiveTimeout(t *testing.T) {
	for _, d := range []time.Duration{0, -5 * time.Second} {
		var out bytes.Buffer
		_, err := run(context.Background(), config{timeout: d, workers: 8}, &out)
		require.EqualError(t, err, "-timeout must be positive, got "+d.String())
		require.Empty(t, out.String())
	}
}

// -seed without -brokers is refused before anything starts: the embedded cluster is always seeded,
// so the flag there would do nothing.
func TestDemoRefusesSeedWithoutBrokers(t *testing.T) {
	var out bytes.Buffer
	_, err := run(context.Background(), config{timeout: time.Minute, workers: 8, seed: true}, &out)
	require.EqualError(t, err, "-seed needs -brokers: the embedded cluster is always seeded")
	require.Empty(t, out.String())
}
