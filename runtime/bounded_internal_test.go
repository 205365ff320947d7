package runtime

import (
	"context"
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/txn"
	"github.com/twmb/franz-go/pkg/kgo"
)

// The dispatcher's own structures stay bounded by what it holds, however long the consumer lags
// (DESIGN §3.6): found by helper-91.

// locked runs f under d's lock, released even when an assertion in f fails: the cleanup's stop
// takes it.
func locked(d *dispatcher, f func()) {
	d.mu.Lock()
	defer d.mu.Unlock()
	f()
}

// newBareNoop is newBare with a handler that does nothing and ordering, stopped and closed at the
// test's end.
func newBareNoop(t *testing.T, mode CommitMode, ordering Ordering) *consumer {
	c := newBare(t, mode, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
	c.cfg.ordering, c.d.ordering = ordering, ordering
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	return c
}

// lagThrough takes and finishes takes records one at a time (one lane) while push queues one more
// record after each take, so the ready list never empties; it returns the list's length and
// capacity at the end.
func lagThrough(t *testing.T, c *consumer, takes int, push func(taken *item)) (length, capacity int) {
	var items []*item
	for range takes {
		var ok bool
		items, ok = c.d.take(items, 1)
		require.True(t, ok)
		push(items[0])
		items, _ = c.d.finishTake(items, 1, 0)
	}
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	require.LessOrEqual(t, c.d.readyLen(), 2, "two units at most are ready")
	return len(c.d.ready), cap(c.d.ready)
}

// ByPartition, one lane behind two partitions: each take pops one partition's unit from the
// ready list and the next record puts it back. The old list grew by an entry per take (23,552
// entries of capacity for 2 ready units after 20,000 takes).
func TestReadyListStaysBoundedWhileLanesLag(t *testing.T) {
	c := newBareNoop(t, Auto, ByPartition)
	next := [2]int64{}
	push := func(p int32) {
		_, _, err := c.d.pushPart("t", p, []*kgo.Record{{Topic: "t", Partition: p, Offset: next[p]}})
		require.NoError(t, err)
		next[p]++
	}
	for p := range int32(2) {
		push(p)
		push(p)
	}
	_, capacity := lagThrough(t, c, 20_000, func(it *item) { push(it.ps.partition) })
	require.Less(t, capacity, 64)
	require.Equal(t, [2]int64{10_002, 10_002}, next, "the lane took the partitions in turn")
}

// Unordered, where every record is a unit of its own: the old list held an entry per record
// taken while a record waited ahead of the lane (20,002 after 20,000 records).
func TestReadyListStaysBoundedUnordered(t *testing.T) {
	c := newBareNoop(t, Auto, Unordered)
	off := int64(0)
	push := func(*item) {
		_, _, err := c.d.pushPart("t", 0, []*kgo.Record{{Topic: "t", Partition: 0, Offset: off}})
		require.NoError(t, err)
		off++
	}
	push(nil)
	push(nil)
	var taken []int64
	length, _ := lagThrough(t, c, 20_000, func(it *item) {
		taken = append(taken, it.off)
		push(it)
	})
	require.Less(t, length, 64)
	for i, off := range taken {
		require.Equal(t, int64(i), off, "records are taken in the order they became ready")
	}
}

// A Transactional window aborted under ByKey: dropQueued empties the units of the keys whose records
// it drops, and forgets them as it forgets copies' units. The old code kept all 100 units, a key
// never seen again for as long as the partition was owned.
func TestAbortedWindowForgetsTheUnitsOfEmptiedKeys(t *testing.T) {
	c := newBareNoop(t, Auto, ByKey)
	c.d.backlogs = false // as a Transactional subscription
	tw := &txnWindow{w: txn.New(context.Background()), c: c}
	c.d.setWindow(tw)
	recs := make([]*kgo.Record, 100)
	for i := range recs {
		recs[i] = &kgo.Record{Topic: "t", Partition: 0, Offset: int64(i), Key: fmt.Appendf(nil, "k%d", i)}
	}
	_, _, err := c.d.pushPart("t", 0, recs)
	require.NoError(t, err)
	ps := c.d.parts[tp{"t", 0}]
	// A lane runs k0's record through the abort: its unit is busy and stays.
	items, ok := c.d.take(nil, 1)
	require.True(t, ok)
	require.Equal(t, []byte("k0"), items[0].rec.Key)
	finished := false
	t.Cleanup(func() { // runs before stop, should an assertion fail: k0's take is finished
		if !finished {
			c.d.finishTake(items, 1, 0)
		}
	})

	tw.w.Abort(errors.New("a retry within the window"))
	c.d.dropQueued(tw)
	locked(c.d, func() {
		require.Equal(t, 1, ps.held, "the 99 queued records were dropped; k0's is in a handler")
		require.Equal(t, 1, len(ps.keys), "k0's unit alone is kept")
		require.Contains(t, ps.keys, "k0")
	})

	c.d.finishTake(items, 1, 0)
	finished = true
	c.d.mu.Lock()
	defer c.d.mu.Unlock()
	require.Zero(t, ps.held)
	require.Empty(t, ps.keys, "k0's unit is forgotten once its record is finished")
}
