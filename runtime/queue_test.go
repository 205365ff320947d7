package runtime

import (
	"context"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A partition's queue that is fed at its end and taken from its front without ever emptying (the
// poll loop admits as the lane drains, the lane never catches up) keeps one array: once takes
// have freed its front, appending moves the queued records back to the start instead of growing
// a new array, and the records come out in offset order, each once. Before, the queue started over
// at its array's start only once emptied: it reallocated every few hundred records for as long as
// the backlog lasted (allocation profiles of the end-to-end benchmark, docs/performance.md).
func TestAQueueTakenFromItsFrontKeepsItsArray(t *testing.T) {
	c := newBare(t, Tracked, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
	defer c.cl.Close()
	defer c.d.stop()
	next := int64(0)
	push := func(n int) {
		recs := make([]*kgo.Record, n)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: next}
			next++
		}
		_, _, err := c.d.pushPart("t", 0, recs)
		require.NoError(t, err)
	}
	array := func() *(*item) {
		c.d.mu.Lock()
		defer c.d.mu.Unlock()
		return unsafe.SliceData(c.d.parts[tp{"t", 0}].single.buf)
	}
	push(500)
	want := int64(0)
	items := make([]*item, 0, laneTake)
	var first *(*item)
	for round := range 400 {
		items, _ = c.d.take(items, laneTake)
		require.Len(t, items, laneTake, "round %d", round)
		for _, it := range items {
			require.Equal(t, want, it.off, "round %d", round)
			want++
			c.complete(it)
		}
		items, _ = c.d.finishTake(items, len(items), 0)
		push(laneTake)
		if round == 20 { // the array's first growth is behind
			first = array()
		}
	}
	require.Same(t, first, array(), "the queue's array was replaced while the queue never emptied")
	require.Equal(t, int64(400*laneTake), want)
}
