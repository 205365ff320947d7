package runtime

import (
	"context"
	"errors"
	goruntime "runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Under Tracked, a lane's take of acked records completes each one as its handler returns
// (CompleteDeferred: the ring slot says done at once) and moves the watermark past them once, as the
// take returns, before the dispatcher finishes it: the partition's span is back to what is still
// in flight, so back-pressure sees the room, and the committer is woken. Nothing else reads the
// tracker here (no committer runs), so only the take itself can have moved it.
func TestATakeMovesTrackedsWatermarkWhenItReturns(t *testing.T) {
	handled := 0
	c, ps, items := takeTen(t, HandlerFunc(func(context.Context, *Delivery) error { handled++; return nil }))
	require.Len(t, items, 10)
	var dl Delivery
	var running []*item
	require.Equal(t, 10, c.handleTake(items, &dl, &running))
	require.Equal(t, 10, handled)
	require.Equal(t, 0, ps.trk.Span(), "the watermark moved past the take")
	select {
	case <-c.wake:
	default:
		t.Fatal("the committer was not woken")
	}
	wm, ok := ps.trk.Watermark()
	require.True(t, ok)
	require.Equal(t, int64(10), wm.Offset)
	c.d.finishTake(items, 10, 0)
}

// A take that stops early (an in-place retry of its 6th record) moves the watermark past the acked
// records before it as it returns, and a take ended by a handler's runtime.Goexit too (before
// laneExited finishes it): the Advance is deferred, not at the loop's end (helper-68).
func TestATakeThatEndsEarlyMovesTrackedsWatermark(t *testing.T) {
	for _, tc := range []struct {
		name string
		stop func() error // what the handler of offset 5 does
		span int          // in flight afterwards: offset 5 and after
	}{
		{"an in-place retry", func() error { return Retry(errors.New("again")) }, 5},
		{"runtime.Goexit", func() error { goruntime.Goexit(); return nil }, 5},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, ps, items := takeTen(t, HandlerFunc(func(_ context.Context, d *Delivery) error {
				if d.Record().Offset == 5 {
					return tc.stop()
				}
				return nil
			}))
			span := -1
			var wg sync.WaitGroup
			wg.Go(func() { // a lane of its own: Goexit ends it
				defer func() { span = ps.trk.Span() }() // after handleTake's deferred Advance
				var dl Delivery
				var running []*item
				c.handleTake(items, &dl, &running)
			})
			wg.Wait()
			require.Equal(t, tc.span, span, "the watermark moved past 0..4 as the take ended")
		})
	}
}

// takeTen pushes offsets 0..9 of partition 0 to a Tracked consumer without lanes (newBare) with
// handler h and takes them as a lane would; the consumer stops when the test ends.
func takeTen(t *testing.T, h Handler) (*consumer, *partState, []*item) {
	c := newBare(t, Tracked, h)
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	recs := make([]*kgo.Record, 10)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: int64(i)}
	}
	_, _, err := c.d.pushPart("t", 0, recs)
	require.NoError(t, err)
	ps := c.d.parts[tp{"t", 0}]
	require.Equal(t, 10, ps.trk.Span())
	items, ok := c.d.take(nil, laneTake)
	require.True(t, ok)
	return c, ps, items
}
