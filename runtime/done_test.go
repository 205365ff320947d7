package runtime

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Auto's done position is one leader epoch and offset pair, raised in franz-go's order (epoch, then
// offset). After a log truncation the rewound records, of a higher epoch, take it back down to
// their offsets, and a record of the old log that finishes late moves it no more. Kept apart (the
// highest epoch beside the highest offset), a rewind to offset 3 in epoch 6 marked {6, 10}: offset
// 10 never existed in epoch 6, and the next owner's leader-epoch check (KIP-320) would not see
// the divergence that {5, 10} shows it (helper-55).
func TestAutoDonePositionFollowsARewind(t *testing.T) {
	ps := &partState{marked: kgo.EpochOffset{Epoch: -1}}
	ps.done.Store(&doneCell{epoch: -1})
	rec := func(epoch int32, offset int64) kgo.EpochOffset {
		return kgo.EpochOffset{Epoch: epoch, Offset: offset}
	}
	_, ok := ps.moved()
	require.False(t, ok, "nothing done yet")
	for o := range int64(10) {
		require.True(t, ps.markDone(rec(5, o), 0))
	}
	require.False(t, ps.markDone(rec(5, 4), 0), "a lower offset of the same epoch")
	for o := range int64(3) { // the new leader's log diverges at offset 3: 3..5 in epoch 6
		require.True(t, ps.markDone(rec(6, 3+o), 0))
	}
	require.False(t, ps.markDone(rec(5, 9), 0), "a record of the truncated log, finishing late")
	got, ok := ps.moved()
	require.True(t, ok)
	require.Equal(t, kgo.EpochOffset{Epoch: 6, Offset: 6}, got)
	_, ok = ps.moved()
	require.False(t, ok, "moved once")

	require.True(t, ps.markDone(rec(6, 6), 0))
	got, _ = ps.moved()
	require.Equal(t, kgo.EpochOffset{Epoch: 6, Offset: 7}, got)
}

// Records of a partition that lanes finish out of order and at once (ByKey, Unordered) leave the
// highest position, with its own epoch, a new leader's records racing the old one's.
func TestAutoDonePositionUnderConcurrentLanes(t *testing.T) {
	ps := &partState{marked: kgo.EpochOffset{Epoch: -1}}
	ps.done.Store(&doneCell{epoch: -1})
	var wg sync.WaitGroup
	for lane := range int64(8) {
		wg.Go(func() {
			for o := lane; o < 8000; o += 8 {
				epoch := int32(1)
				if o >= 4000 {
					epoch = 2 // a new leader from offset 4,000 on
				}
				ps.markDone(kgo.EpochOffset{Epoch: epoch, Offset: o}, 0)
			}
		})
	}
	wg.Wait()
	got, ok := ps.moved()
	require.True(t, ok)
	require.Equal(t, kgo.EpochOffset{Epoch: 2, Offset: 8000}, got)
}
