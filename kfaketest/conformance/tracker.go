package conformance

import (
	"context"
	"fmt"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

// trackerScenarios are DESIGN §3.1: the committable position is the lowest offset still in flight,
// or the highest delivered + 1.
func trackerScenarios() []scenario {
	return []scenario{
		{name: "§3.1 the position holds at the lowest offset in flight while later keys finish", run: holdsAtLowestInFlight},
		{name: "§3.1 out-of-order completions under Unordered never commit past a running record", run: unorderedHoldsPosition},
	}
}

// Ten keyed records on one partition, ten ByKey lanes; offset 3 blocks. The other nine finish, and
// the committed offset is exactly 3 (no commit ever asks for more) until 3 is released; then 10.
func holdsAtLowestInFlight(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: in, Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	e.c.ProduceTo(e, 0, recs...)
	release := newGate()
	var done calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 3 && !release.wait(ctx) {
				return ctx.Err()
			}
			done.add(d)
			return nil
		}), runtime.Workers(10), runtime.ByKey)
	e.start(app)
	e.eventually(func() bool { return done.len() == 9 }, "the nine unblocked records were not all handled")
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 3})
	e.requireCommitsAtMost(g, in, 0, 3)
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 10})
	require.Len(e, done.all(), 10, "each record handled once")
	e.requireNonDecreasing(g, in, 0)
}

// Unordered lanes: offset 0 blocks while 1..9 finish on other lanes; nothing is committed until 0
// returns, then everything is.
func unorderedHoldsPosition(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	var vs []string
	for i := range 10 {
		vs = append(vs, fmt.Sprint(i))
	}
	e.values(in, 0, vs...)
	release := newGate()
	var done calls
	app := e.app()
	runtime.Handle(app, runtime.Topic(in).Group(g).Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 0 && !release.wait(ctx) {
				return ctx.Err()
			}
			done.add(d)
			return nil
		}), runtime.Workers(4), runtime.Unordered)
	e.start(app)
	e.eventually(func() bool { return done.len() == 9 }, "records behind the blocked one did not finish")
	// Nothing past offset 0 while it is in flight; a commit of 0 itself is allowed (the watermark
	// of a partition whose first record is in flight is 0).
	for p, off := range e.c.Committed(e, g, in) {
		require.LessOrEqual(e, off, int64(0), "partition %d committed past offset 0 while it is in flight", p)
	}
	e.requireCommitsAtMost(g, in, 0, 0)
	release.open()
	e.c.WaitCommitted(e, g, in, map[int32]int64{0: 10})
	require.Len(e, done.all(), 10)
}
