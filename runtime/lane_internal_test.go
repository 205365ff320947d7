package runtime

import (
	"context"
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
	c := newBare(t, Tracked, HandlerFunc(func(context.Context, *Delivery) error { handled++; return nil }))
	defer c.cl.Close()
	defer c.d.stop()
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
