package tracker

import (
	"math"
	"testing"

	"github.com/stretchr/testify/require"
)

// Each (topic, partition) has its own state: two partitions of a topic, and one partition number on
// two topics, never share a watermark (DESIGN §3.1 is per partition).
func TestTrackerKeepsPartitionsApart(t *testing.T) {
	tr := New(16)
	cases := []struct {
		name      string
		topic     string
		partition int32
		deliver   []int64
		complete  []int64
		want      int64
	}{
		{"orders partition 0", "orders", 0, []int64{0, 1, 2}, []int64{0}, 1},
		{"orders partition 1", "orders", 1, []int64{0, 1, 2}, []int64{1, 2}, 0},
		{"payments partition 0, the same number on another topic", "payments", 0, []int64{7, 8}, []int64{7, 8}, 9},
	}
	for _, c := range cases {
		p := tr.Partition(c.topic, c.partition)
		tokens := deliverAll(t, p, c.deliver...)
		for _, o := range c.complete {
			require.Equal(t, Completed, p.Complete(tokens[o]), "%s: complete %d", c.name, o)
		}
	}
	for _, c := range cases {
		p, ok := tr.Lookup(c.topic, c.partition)
		require.True(t, ok, c.name)
		require.Same(t, tr.Partition(c.topic, c.partition), p, c.name)
		require.Equal(t, c.want, watermark(t, p), c.name)
	}
	require.Equal(t, map[string]map[int32]Watermark{
		"orders":   {0: {Offset: 1}, 1: {Offset: 0}},
		"payments": {0: {Offset: 9}},
	}, tr.Moved())
	require.Nil(t, tr.Moved(), "nothing moved since")

	tr.Partition("orders", 0).Reset()
	require.Nil(t, tr.Moved(), "a reset alone gives no watermark")
	require.Equal(t, int64(0), watermark(t, tr.Partition("orders", 1)), "the other partition kept its state")
	require.Equal(t, int64(9), watermark(t, tr.Partition("payments", 0)))
}

// Tracker.Moved reports only the partitions that moved, each once.
func TestTrackerMovedReportsEachMoveOnce(t *testing.T) {
	tr := New(8)
	require.Nil(t, tr.Moved(), "no partitions")
	a := tr.Partition("t", 0)
	b := tr.Partition("t", 1)
	require.Nil(t, tr.Moved(), "no deliveries")

	ta := deliverAll(t, a, 10, 11)
	require.Equal(t, map[string]map[int32]Watermark{"t": {0: {Offset: 10}}}, tr.Moved())
	deliverAll(t, b, 3)
	a.Complete(ta[11])
	require.Equal(t, map[string]map[int32]Watermark{"t": {1: {Offset: 3}}}, tr.Moved(), "a did not move")
	a.Complete(ta[10])
	require.Equal(t, map[string]map[int32]Watermark{"t": {0: {Offset: 12}}}, tr.Moved())
	require.Nil(t, tr.Moved())
}

// Remove forgets a partition; asking for it again starts afresh.
func TestTrackerRemove(t *testing.T) {
	tr := New(4)
	p := tr.Partition("t", 2)
	deliverAll(t, p, 5)
	tr.Remove("t", 2)
	tr.Remove("t", 9) // unknown: nothing happens
	_, ok := tr.Lookup("t", 2)
	require.False(t, ok)
	require.Nil(t, tr.Moved(), "a removed partition is not reported")

	q := tr.Partition("t", 2)
	require.NotSame(t, p, q)
	_, ok = q.Watermark()
	require.False(t, ok)
	require.Equal(t, int64(5), watermark(t, p), "the removed Partition still answers its holders")
}

// A token of a removed Partition handed to the one that replaced it is Stale when its offset
// differs, and moves nothing (DESIGN §3.1).
func TestCompleteRefusesATokenOfAnotherPartition(t *testing.T) {
	tr := New(4)
	old, err := tr.Partition("t", 0).Deliver(100, 0)
	require.NoError(t, err)
	tr.Remove("t", 0)
	q := tr.Partition("t", 0)
	d50, err := q.Deliver(50, 0)
	require.NoError(t, err)
	_, err = q.Deliver(51, 0)
	require.NoError(t, err)
	require.Equal(t, Stale, q.Complete(old), "same sequence number, another offset")
	require.Equal(t, int64(50), watermark(t, q), "50 is still in flight")
	require.Equal(t, Completed, q.Complete(d50))
	require.Equal(t, int64(51), watermark(t, q))
}

// Offsets no Kafka record can have are refused and record nothing.
func TestDeliverRefusesImpossibleOffsets(t *testing.T) {
	p := NewPartition(4)
	for _, off := range []int64{-1, -5, math.MaxInt64} {
		d, err := p.Deliver(off, 0)
		require.ErrorIs(t, err, ErrOffset, "offset %d", off)
		require.Equal(t, Delivery{}, d)
	}
	require.Equal(t, 0, p.InFlight())
	_, err := p.Deliver(0, 0)
	require.NoError(t, err)
}
