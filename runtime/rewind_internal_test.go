package runtime

import (
	"fmt"
	"maps"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Records of partition 0 from..to-1 as fetched after rewinds (rewinds tags them), keyed by
// offset mod 3.
func fetched(from, to int64, rewinds int) []*kgo.Record {
	var recs []*kgo.Record
	for off := from; off < to; off++ {
		recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Offset: off,
			Key: fmt.Appendf(nil, "k%d", off%3), Value: fmt.Appendf(nil, "%d/%d", off, rewinds)})
	}
	return recs
}

// pushTo0 queues recs, records of partition 0 of topic "t", as the poll loop does (one pushPart),
// and requires that it accepted them.
func pushTo0(t *testing.T, c *consumer, recs []*kgo.Record) {
	t.Helper()
	_, _, err := c.d.pushPart("t", 0, recs)
	require.NoError(t, err)
}

// drain takes and finishes one record at a time until nothing is ready, completing each in the
// tracker (Tracked) or marking it (Auto) as a lane does, and returns the values taken, in order.
func drain(t *testing.T, c *consumer) []string {
	var got []string
	for {
		var items []*item
		locked(c.d, func() { items = c.d.grabLocked(nil, 1) }) // take without waiting
		if len(items) == 0 {
			return got
		}
		got = append(got, string(items[0].rec.Value))
		if trk := items[0].ps.trk; trk != nil {
			trk.Complete(items[0].slot)
		}
		c.markDone(items[0])
		c.d.finishTake(items, 1, 0)
	}
}

// A partition fetched again from 5 while 0..9 are queued (ByKey): the queued 5..9 are dropped, and
// the units of their keys with nothing left are forgotten. What runs is 0..4 of the first fetch and
// 5..7 of the second, once each.
func TestARewindDropsTheQueuedRecordsAtOrAboveIt(t *testing.T) {
	for _, mode := range []CommitMode{Auto, Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := newBareNoop(t, mode, ByKey)
			pushTo0(t, c, fetched(0, 10, 0))
			pushTo0(t, c, fetched(5, 8, 1))
			ps := c.d.parts[tp{"t", 0}]
			locked(c.d, func() { require.Equal(t, 8, ps.held, "0..4 of the first fetch, 5..7 of the second") })
			got := drain(t, c)
			require.ElementsMatch(t, []string{"0/0", "1/0", "2/0", "3/0", "4/0", "5/1", "6/1", "7/1"}, got)
			c.d.mu.Lock()
			defer c.d.mu.Unlock()
			require.Zero(t, ps.held)
			require.Empty(t, ps.keys)
			if ps.trk != nil {
				w, _ := ps.trk.Moved()
				require.Equal(t, int64(8), w.Offset, "the watermark passes every record once")
			}
		})
	}
}

// A rewind while records wait in the backlog (MaxInFlightPerPartition 4): the backlog's records at
// or above the rewind's offset are cut, never admitted; those below it are admitted as before.
func TestARewindCutsTheBacklog(t *testing.T) {
	c := newBareNoop(t, Tracked, ByPartition)
	c.d.perPart = 4
	pushTo0(t, c, fetched(0, 10, 0))
	ps := c.d.parts[tp{"t", 0}]
	locked(c.d, func() {
		require.Equal(t, 4, ps.held)
		require.Len(t, ps.backlog, 6)
	})
	pushTo0(t, c, fetched(6, 8, 1))
	require.Equal(t, []string{"0/0", "1/0", "2/0", "3/0", "4/0", "5/0", "6/1", "7/1"}, drain(t, c))
	w, _ := ps.trk.Moved()
	require.Equal(t, int64(8), w.Offset, "Tracked: the watermark passes every record once")
}

// Auto: 7/0 is in its handler (epoch 0) when the partition is fetched again from 5 (epoch 1).
// Returning, it marks nothing: its done position, {0, 8}, would pass 5/1..7/1, not handled yet,
// and a commit of it would skip them after a crash (helper-93). The new copies then mark {1, 8}.
func TestAStaleRecordMarksNothingUnderAuto(t *testing.T) {
	c := newBareNoop(t, Auto, ByPartition)
	epoch := func(recs []*kgo.Record, e int32) []*kgo.Record {
		for _, r := range recs {
			r.LeaderEpoch = e
		}
		return recs
	}
	pushTo0(t, c, epoch(fetched(7, 8, 0), 0))
	items, ok := c.d.take(nil, 1)
	require.True(t, ok)
	pushTo0(t, c, epoch(fetched(5, 8, 1), 1))
	ps := c.d.parts[tp{"t", 0}]
	require.True(t, items[0].stale())
	c.markDone(items[0])
	c.d.finishTake(items, 1, 0)
	require.Equal(t, int32(-1), ps.done.Load().epoch, "nothing marked")
	require.Equal(t, []string{"5/1", "6/1", "7/1"}, drain(t, c))
	done := ps.done.Load()
	require.Equal(t, kgo.EpochOffset{Epoch: 1, Offset: 8}, kgo.EpochOffset{Epoch: done.epoch, Offset: done.next.Load()})
}

// A rewind at 1 (ByKey) that fetches offset 1 alone again: k2's records (2, 5, 8) are all dropped
// and its unit is forgotten; k1's new record gets a new unit, k0 keeps 0.
func TestARewindForgetsTheUnitsOfEmptiedKeys(t *testing.T) {
	c := newBareNoop(t, Auto, ByKey)
	pushTo0(t, c, fetched(0, 10, 0))
	pushTo0(t, c, fetched(1, 2, 1))
	ps := c.d.parts[tp{"t", 0}]
	locked(c.d, func() {
		require.Equal(t, 2, ps.held)
		require.ElementsMatch(t, []string{"k0", "k1"}, slices.Collect(maps.Keys(ps.keys)))
	})
	require.ElementsMatch(t, []string{"0/0", "1/1"}, drain(t, c))
}

// ByKey: a lane has taken k0's records 0 and 3 when the partition is fetched again from 0, where the
// new log holds another key: both are stale, the lane handles none of them (handleTake returns 0),
// and k0's unit, emptied and idle, is forgotten by finishTake itself, no record of it finished.
func TestAStaleTakeForgetsItsEmptiedKeyUnit(t *testing.T) {
	c := newBareNoop(t, Auto, ByKey)
	pushTo0(t, c, fetched(0, 4, 0)) // k0: 0, 3; k1: 1; k2: 2
	var items []*item
	locked(c.d, func() { items = c.d.grabLocked(nil, laneTake) })
	require.Len(t, items, 2)
	require.Equal(t, []byte("k0"), items[0].rec.Key)
	pushTo0(t, c, []*kgo.Record{{Topic: "t", Partition: 0, Offset: 0, Key: []byte("kx"), Value: []byte("0/1")}})
	require.True(t, items[0].stale())
	require.True(t, items[1].stale())
	c.d.finishTake(items, 0, 0)
	ps := c.d.parts[tp{"t", 0}]
	locked(c.d, func() {
		require.NotContains(t, ps.keys, "k0")
		require.Equal(t, 1, ps.held, "0/1 alone")
	})
	require.Equal(t, []string{"0/1"}, drain(t, c))
}

// Auto: a lane has loaded the partition's done cell, {0, 7}, for 7/0 and found it not stale, when
// the partition is fetched again from 5 in epoch 1; its compare-and-swap then raises that cell to
// 8. The committer must not see it: {0, 8} would pass 5/1..7/1, not handled yet (helper-94). The
// rewind renewed the cell, so the raise lands in one the committer no longer reads.
func TestAMarkRacingARewindIsNotSeen(t *testing.T) {
	c := newBareNoop(t, Auto, ByPartition)
	pushTo0(t, c, fetched(6, 8, 0))
	ps := c.d.parts[tp{"t", 0}]
	items, ok := c.d.take(nil, 1)
	require.True(t, ok)
	require.Equal(t, "6/0", string(items[0].rec.Value))
	c.markDone(items[0])
	c.d.finishTake(items, 1, 0)
	got, ok := ps.moved()
	require.True(t, ok)
	require.Equal(t, kgo.EpochOffset{Epoch: 0, Offset: 7}, got)

	items, ok = c.d.take(nil, 1)
	require.True(t, ok)
	require.Equal(t, "7/0", string(items[0].rec.Value))
	cell := ps.done.Load() // the lane's load, its stale check passing
	require.False(t, items[0].stale())
	recs := fetched(5, 8, 1)
	for _, r := range recs {
		r.LeaderEpoch = 1
	}
	pushTo0(t, c, recs)
	require.True(t, cell.next.CompareAndSwap(7, 8), "the lane's raise, after the rewind")
	_, ok = ps.moved()
	require.False(t, ok, "the stale raise is not marked")
	c.d.finishTake(items, 1, 0)

	require.Equal(t, []string{"5/1", "6/1", "7/1"}, drain(t, c))
	got, ok = ps.moved()
	require.True(t, ok)
	require.Equal(t, kgo.EpochOffset{Epoch: 1, Offset: 8}, got)
}
