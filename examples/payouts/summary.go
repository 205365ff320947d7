package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"
)

// Summary is what a run did: per subscription, what its records came to and where its group's
// committed offsets stand; what pay_out added to its output topics; what the handlers did; and
// how long it took.
type Summary struct {
	Cluster  string // "embedded kfake cluster", or the brokers
	Workers  int    // lanes per subscription
	Subs     []SubSummary
	Outputs  []Output
	Effects  Effects
	Seeding  time.Duration // producing the input
	Settling time.Duration // from Start until every group had committed up to the high watermarks
	Shutdown time.Duration
	Complete bool // every group's committed offsets reached the high watermarks by the run's end
}

// SubSummary is one subscription's part of the Summary.
type SubSummary struct {
	Name   string
	Mode   string // "Auto" or "Tracked"
	Group  string
	Topic  string
	Input  int64 // records this run produced to Topic (0 when it produced none)
	Counts       // from the runtime's Settled events
	// Partitions holds each partition's committed offset and high watermark after shutdown.
	Partitions []PartitionOffsets
}

// Output is how many records a run added to one of pay_out's output topics.
type Output struct {
	Topic string
	Added int64
}

// newSummary returns an empty Summary with one SubSummary per subscription.
func newSummary() Summary {
	var s Summary
	for _, sub := range subscriptions {
		s.Subs = append(s.Subs, SubSummary{Name: sub.name, Mode: sub.mode.String(), Group: sub.group, Topic: sub.topic})
	}
	return s
}

// input counts one produced record of topic.
func (s *Summary) input(topic string) {
	for i := range s.Subs {
		if s.Subs[i].Topic == topic {
			s.Subs[i].Input++
		}
	}
}

// Settled returns the records settled for good over all subscriptions.
func (s *Summary) Settled() int64 {
	var n int64
	for _, sub := range s.Subs {
		n += sub.Records
	}
	return n
}

// RecordsPerSecond is Settled over Settling.
func (s *Summary) RecordsPerSecond() float64 {
	if s.Settling <= 0 {
		return 0
	}
	return float64(s.Settled()) / s.Settling.Seconds()
}

// WriteTo writes the summary as the demo prints it: a table of outcomes, one line of committed
// offsets per group, the outputs, the handlers' effects and the times.
func (s *Summary) WriteTo(w io.Writer) (int64, error) {
	cw := &countingWriter{w: w}
	var input int64
	for _, sub := range s.Subs {
		input += sub.Input
	}
	fmt.Fprintf(cw, "Tidemark payouts demo on the %s, %d lanes per subscription", s.Cluster, s.Workers)
	if input > 0 {
		fmt.Fprintf(cw, ", %d input records produced in %s", input, round(s.Seeding))
	}
	fmt.Fprintln(cw)
	if !s.Complete {
		fmt.Fprintln(cw, "INCOMPLETE: not every record settled before the run ended")
	}
	fmt.Fprintln(cw)

	const row = "%-12s %-7s %-14s %7v %7v %7v %7v %7v %9v %7v %5v %13v %5v\n"
	fmt.Fprintf(cw, row, "subscription", "mode", "group", "input", "settled", "handled", "acked", "dropped",
		"malformed", "retried", "spent", "dead-lettered", "lost")
	for _, sub := range s.Subs {
		fmt.Fprintf(cw, row, sub.Name, sub.Mode, sub.Group, sub.Input, sub.Records, sub.Handled, sub.Acked,
			sub.Dropped, sub.Malformed, sub.Retried, sub.Spent, sub.DeadLettered, sub.Lost)
	}
	fmt.Fprintln(cw)
	fmt.Fprintln(cw, "committed offset / high watermark, per partition")
	tw := tabwriter.NewWriter(cw, 0, 0, 2, ' ', 0)
	for _, sub := range s.Subs {
		var ps []string
		for _, p := range sub.Partitions {
			ps = append(ps, fmt.Sprintf("%d: %d/%d", p.Partition, p.Committed, p.HighWatermark))
		}
		fmt.Fprintf(tw, "  %s\t%s\t%s\n", sub.Group, sub.Topic, strings.Join(ps, "  "))
	}
	tw.Flush()

	fmt.Fprintln(cw)
	var outs []string
	for _, o := range s.Outputs {
		outs = append(outs, fmt.Sprintf("%s +%d", o.Topic, o.Added))
	}
	e := s.Effects
	fmt.Fprintf(cw, "written:  %s\n", strings.Join(outs, ", "))
	fmt.Fprintf(cw, "bank:     %d payouts paid (%d cents) in %d calls\n", e.Payouts, e.PaidCents, e.BankCalls)
	fmt.Fprintf(cw, "counters: %d page views counted on %d pages\n", e.Views, e.Pages)
	fmt.Fprintf(cw, "ledger:   %d statement lines posted (%d cents) on %d statements\n", e.Lines, e.LedgerCents, e.Statements)
	fmt.Fprintf(cw, "time:     %d records settled in %s (%.0f records/s), shutdown %s\n",
		s.Settled(), round(s.Settling), s.RecordsPerSecond(), round(s.Shutdown))
	return cw.n, cw.err
}

// round rounds d for display.
func round(d time.Duration) time.Duration {
	if d > time.Second {
		return d.Round(10 * time.Millisecond)
	}
	return d.Round(time.Millisecond)
}

// countingWriter counts what it writes and keeps the first error.
type countingWriter struct {
	w   io.Writer
	n   int64
	err error
}

// Write writes p to the underlying writer, unless an earlier write failed.
func (c *countingWriter) Write(p []byte) (int, error) {
	if c.err != nil {
		return 0, c.err
	}
	n, err := c.w.Write(p)
	c.n += int64(n)
	c.err = err
	return n, err
}
