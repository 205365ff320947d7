package conformance

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

// A mode is one column of the table in DESIGN §3.2.
type mode struct {
	name string
	txn  bool
	of   func(e *env, id string) runtime.CommitMode
}

var modes = []mode{
	{"Auto", false, func(*env, string) runtime.CommitMode { return runtime.Auto }},
	{"Tracked", false, func(*env, string) runtime.CommitMode { return runtime.Tracked }},
	{"Transactional", true, func(e *env, id string) runtime.CommitMode { return runtime.Transactional(e.name(id)) }},
}

// outcomeScenarios are the cells of DESIGN §3.2's table: every outcome in every commit mode.
func outcomeScenarios() []scenario {
	var out []scenario
	for _, m := range modes {
		out = append(out,
			scenario{name: "§3.2 " + m.name + " ack", run: func(e *env) { ackCell(e, m) }},
			scenario{name: "§3.2 " + m.name + " drop", run: func(e *env) { dropCell(e, m) }},
			scenario{name: "§3.2 " + m.name + " retry without a policy", run: func(e *env) { retryNoPolicyCell(e, m) }},
			scenario{name: "§3.2 " + m.name + " retry with MaxAttempts or RetryAfter", run: func(e *env) { retryCopyCell(e, m) }},
			scenario{name: "§3.2 " + m.name + " retry with only DeadLetter", run: func(e *env) { retryDeadLetterCell(e, m) }},
		)
	}
	return out
}

// cell is the common shape of a table scenario: one subscription on in, a handler that records
// its calls and, in the Transactional mode, publishes "out-<value>" to out for every record it
// acks (with its ctx: inside the window's transaction).
type cell struct {
	e     *env
	m     mode
	app   *runtime.App
	calls calls
	out   string // Transactional: the output topic
}

func newCell(e *env, m mode, extra ...runtime.Option) *cell {
	c := &cell{e: e, m: m, app: e.app(extra...)}
	if m.txn {
		c.out = e.topic("out", 1)
	}
	return c
}

// handle registers decide on sub: decide's error is the outcome; a nil outcome publishes the output
// first in the Transactional mode.
func (c *cell) handle(sub runtime.Subscription, decide func(d *runtime.Delivery) error, opts ...runtime.HandleOption) {
	runtime.Handle(c.app, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		c.calls.add(d)
		err := decide(d)
		if err == nil && c.m.txn {
			return c.publish(ctx, d)
		}
		return err
	}), opts...)
}

func (c *cell) publish(ctx context.Context, d *runtime.Delivery) error {
	return c.app.Publish(ctx, &kgo.Record{Topic: c.out, Key: d.Record().Key, Value: []byte("out-" + string(d.Record().Value))})
}

// requireOutputs checks, in the Transactional mode, that out holds exactly one output per value
// under read_committed.
func (c *cell) requireOutputs(values ...string) {
	c.e.Helper()
	if !c.m.txn {
		return
	}
	var want []string
	for _, v := range values {
		want = append(want, "out-"+v)
	}
	slices.Sort(want)
	require.Equal(c.e, want, sortedValues(c.e.c.ReadAll(c.e, c.out, true)), "exactly one output per input under read_committed")
}

// requireCommitKind checks (kfake only) that the group's commits are transactional in the
// Transactional mode, with its transactional id, and plain offset commits otherwise.
func (c *cell) requireCommitKind(group, topic string, txnID string) {
	c.e.Helper()
	if !c.e.kfake("commit kind") {
		return
	}
	log := c.e.c.CommitLog().Of(group, topic, 0)
	require.NotEmpty(c.e, log)
	for _, cm := range log {
		require.Equal(c.e, c.m.txn, cm.Txn, "%+v", cm)
		if c.m.txn {
			require.Equal(c.e, txnID, cm.TxnID, "%+v", cm)
		}
	}
}

// waitDone waits until the group has committed the topic's high watermarks: everything, markers
// included, is settled (DESIGN §3.7a).
func (c *cell) waitDone(group, topic string) map[int32]int64 {
	c.e.Helper()
	hw := c.e.c.HighWatermarks(c.e, topic)
	waitCommitted(c.e, group, topic, hw, time.Minute)
	return hw
}

// ack (nil): Auto's autocommit covers the records; Tracked completes them; Transactional commits
// them with their window, together with their outputs. Every record is handled exactly once and
// the committed offsets reach the high watermarks.
func ackCell(e *env, m mode) {
	in, g := e.topic("in", 2), e.name("g")
	var all []string
	for p := range int32(2) {
		var vs []string
		for i := range 5 {
			vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
		}
		e.values(in, p, vs...)
		all = append(all, vs...)
	}
	c := newCell(e, m)
	c.handle(runtime.Topic(in).Group(g).Commit(m.of(e, "tx")), func(*runtime.Delivery) error { return nil }, runtime.Workers(2))
	e.start(c.app)
	hw := c.waitDone(g, in)
	if !m.txn {
		require.Equal(e, map[int32]int64{0: 5, 1: 5}, hw)
	}
	e.stop(c.app)
	require.Equal(e, all, slices.Sorted(slices.Values(c.calls.values())), "every record handled exactly once")
	require.Equal(e, slices.Repeat([]int{1}, 10), c.calls.attempts())
	c.requireOutputs(all...)
	c.requireCommitKind(g, in, e.name("tx"))
	require.Equal(e, hw, e.c.Committed(e, g, in), "the final commit of Shutdown keeps the position")
}

// drop: as ack; with a DeadLetter declared the record is copied there first (inside the window in
// the Transactional mode), with its provenance headers.
func dropCell(e *env, m mode) {
	in, plain, dlq, g, g2 := e.topic("in", 1), e.topic("plain", 1), e.topic("dlq", 1), e.name("g"), e.name("g2")
	e.values(in, 0, "a", "b", "c")
	e.values(plain, 0, "x")
	c := newCell(e, m)
	decide := func(d *runtime.Delivery) error {
		switch string(d.Record().Value) {
		case "b", "x":
			return runtime.Drop(errors.New("unwanted"))
		}
		return nil
	}
	c.handle(runtime.Topic(in).Group(g).Commit(m.of(e, "tx")), decide, runtime.DeadLetter(dlq))
	c.handle(runtime.Topic(plain).Group(g2).Commit(m.of(e, "tx2")), decide)
	e.start(c.app)
	c.waitDone(g, in)
	c.waitDone(g2, plain)
	e.stop(c.app)
	require.Equal(e, []string{"a", "b", "c", "x"}, slices.Sorted(slices.Values(c.calls.values())), "each record handled once")
	dead := e.c.ReadAll(e, dlq, true)
	require.Len(e, dead, 1, "one dead-letter record, for b")
	requireDeadLetter(e, dead[0], "b", in, 0, 1, g, "unwanted", 1)
	c.requireOutputs("a", "c")
	if !m.txn {
		require.Equal(e, map[int32]int64{0: 3}, e.c.Committed(e, g, in))
		require.Equal(e, map[int32]int64{0: 1}, e.c.Committed(e, g2, plain))
	}
}

// requireDeadLetter checks a dead-letter record's value and provenance headers (DESIGN §3.3).
func requireDeadLetter(e *env, r *kgo.Record, value, topic string, p int32, offset int64, group, errText string, attempts int) {
	e.Helper()
	require.Equal(e, value, string(r.Value))
	want := map[string][]string{
		"x-tidemark-dlq-topic":     {topic},
		"x-tidemark-dlq-partition": {strconv.Itoa(int(p))},
		"x-tidemark-dlq-offset":    {strconv.FormatInt(offset, 10)},
		"x-tidemark-dlq-group":     {group},
		"x-tidemark-dlq-error":     {errText},
		"x-tidemark-dlq-attempts":  {strconv.Itoa(attempts)},
	}
	for k, v := range want {
		require.Equal(e, v, hv(r, k), "header %s of the dead-letter record", k)
	}
	require.Len(e, hv(r, "x-tidemark-dlq-timestamp"), 1)
}

// retry without a policy: refused under Auto (ErrRetryUnsupported, the record does not come
// back); handled again in place under Tracked, before the records behind it, with the position
// waiting for it; under Transactional the window aborts, its outputs stay invisible, and it is
// read again.
func retryNoPolicyCell(e *env, m mode) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "a", "b", "c")
	obs := &observer{}
	c := newCell(e, m, runtime.Observe(obs))
	retried := newGate() // Tracked: b's second attempt waits for the position check
	var failed bool      // b has failed once (one lane: no race)
	runtime.Handle(c.app, runtime.Topic(in).Group(g).Commit(m.of(e, "tx")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			c.calls.add(d)
			v := string(d.Record().Value)
			if m.txn {
				if err := c.publish(ctx, d); err != nil { // published, then failed: never visible
					return err
				}
			}
			if v != "b" {
				return nil
			}
			if !failed {
				failed = true
				return runtime.Retry(errors.New("try again"))
			}
			if m.name == "Tracked" && !retried.wait(ctx) {
				return ctx.Err()
			}
			return nil
		}), fastBackoff)
	e.start(c.app)
	switch m.name {
	case "Auto":
		e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3})
		e.stop(c.app)
		require.Equal(e, []string{"a@1", "b@1", "c@1"}, c.calls.tagged(), "the refused record does not come back")
		refused := obs.outcomes(runtime.OutcomeRetryRefused)
		require.Len(e, refused, 1)
		require.Equal(e, int64(1), refused[0].Offset)
		require.ErrorIs(e, refused[0].Err, runtime.ErrRetryUnsupported)
	case "Tracked":
		e.eventually(func() bool { return c.calls.len() == 3 }, "b was not handled again")
		e.c.WaitCommitted(e, g, in, map[int32]int64{0: 1})
		e.requireCommitsAtMost(g, in, 0, 1)
		retried.open()
		e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3})
		e.stop(c.app)
		require.Equal(e, []string{"a@1", "b@1", "b@2", "c@1"}, c.calls.tagged(), "in place, before c")
		require.Len(e, obs.outcomes(runtime.OutcomeRetry), 1)
	default:
		c.waitDone(g, in)
		e.stop(c.app)
		require.True(e, failed)
		vs := c.calls.values()
		require.GreaterOrEqual(e, len(vs), 4, "the aborted window was read again: %v", vs)
		require.Equal(e, 2, count(vs, "b"), "b: failed, then read again with its window: %v", vs)
		c.requireOutputs("a", "b", "c")
		require.Greater(e, len(e.c.ReadAll(e, c.out, false)), 3, "the aborted window's outputs exist, uncommitted")
	}
}

func count[T comparable](s []T, v T) int {
	n := 0
	for _, x := range s {
		if x == v {
			n++
		}
	}
	return n
}

// retry with MaxAttempts, or RetryAfter: a retry copy goes to the retry address (the source
// partition) at once, carrying the retry count, the origin and the group, and not-before; the
// original is settled; the copy is handled when due (in the Transactional mode the copy is produced
// inside the window).
func retryCopyCell(e *env, m mode) {
	in, g := e.topic("in", 1), e.name("g")
	orig := e.values(in, 0, "a", "b", "c", "d")
	const delay = 300 * time.Millisecond
	c := newCell(e, m)
	c.handle(runtime.Topic(in).Group(g).Commit(m.of(e, "tx")), func(d *runtime.Delivery) error {
		if d.Attempt() > 1 {
			return nil
		}
		switch string(d.Record().Value) {
		case "b":
			return errors.New("bank down") // a copy, under MaxAttempts
		case "d":
			return runtime.RetryAfter(delay, errors.New("later"))
		}
		return nil
	}, runtime.MaxAttempts(3), fastBackoff)
	e.start(c.app)
	e.eventually(func() bool { return c.calls.len() == 6 }, "the copies were not handled: %v", c.calls.tagged())
	c.waitDone(g, in)
	e.stop(c.app)

	byValue := map[string][]call{}
	for _, x := range c.calls.all() {
		byValue[string(x.rec.Value)] = append(byValue[string(x.rec.Value)], x)
	}
	for v, want := range map[string][]int{"a": {1}, "b": {1, 2}, "c": {1}, "d": {1, 2}} {
		var got []int
		for _, x := range byValue[v] {
			got = append(got, x.attempt)
		}
		require.Equal(e, want, got, "attempts of %s", v)
	}
	all := e.c.ReadAll(e, in, true)
	require.Equal(e, []string{"a", "b", "c", "d", "b", "d"}, recValues(all), "the originals, then one copy each")
	for i, o := range []int64{1, 3} {
		cp := all[4+i]
		require.Equal(e, byValue[string(cp.Value)][1].rec.Offset, cp.Offset, "the copy is what was handled again")
		require.Equal(e, []string{"1"}, hv(cp, "x-tidemark-retry-count"))
		require.Equal(e, []string{in}, hv(cp, "x-tidemark-origin-topic"))
		require.Equal(e, []string{"0"}, hv(cp, "x-tidemark-origin-partition"))
		require.Equal(e, []string{strconv.FormatInt(o, 10)}, hv(cp, "x-tidemark-origin-offset"))
		require.Equal(e, []string{strconv.FormatInt(orig[o].Timestamp.UnixMilli(), 10)}, hv(cp, "x-tidemark-origin-timestamp"))
		require.Equal(e, []string{g}, hv(cp, "x-tidemark-retry-group"))
		require.Len(e, hv(cp, "x-tidemark-not-before"), 1)
	}
	dCopy := byValue["d"][1]
	nb, err := strconv.ParseInt(hv(dCopy.rec, "x-tidemark-not-before")[0], 10, 64)
	require.NoError(e, err)
	require.GreaterOrEqual(e, nb, byValue["d"][0].at.Add(delay).UnixMilli()-1, "not-before = failure + RetryAfter's d")
	require.False(e, dCopy.at.Before(time.UnixMilli(nb)), "the copy was handled before its not-before time")
	c.requireOutputs("a", "b", "c", "d")
	if !m.txn {
		require.Equal(e, map[int32]int64{0: 6}, e.c.Committed(e, g, in))
	}
}

// retry with only DeadLetter: the first failure goes to the dead-letter topic (inside the window in
// the Transactional mode) and the record is settled.
func retryDeadLetterCell(e *env, m mode) {
	in, dlq, g := e.topic("in", 1), e.topic("dlq", 1), e.name("g")
	e.values(in, 0, "a", "b", "c")
	c := newCell(e, m)
	c.handle(runtime.Topic(in).Group(g).Commit(m.of(e, "tx")), func(d *runtime.Delivery) error {
		if string(d.Record().Value) == "b" {
			return errors.New("bank down")
		}
		return nil
	}, runtime.DeadLetter(dlq), fastBackoff)
	e.start(c.app)
	c.waitDone(g, in)
	e.stop(c.app)
	require.Equal(e, []string{"a@1", "b@1", "c@1"}, c.calls.tagged())
	dead := e.c.ReadAll(e, dlq, true)
	require.Len(e, dead, 1)
	requireDeadLetter(e, dead[0], "b", in, 0, 1, g, "bank down", 1)
	c.requireOutputs("a", "c")
	if !m.txn {
		require.Equal(e, map[int32]int64{0: 3}, e.c.Committed(e, g, in))
	}
}
