package runtime

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// dropUnowned detaches only the states it was given that are still held: a partition assigned to
// the member again after the coordinator's answer has a new state, which stays (helper-100: an
// answer from before a rebalance detached partitions the member had just been assigned).
func TestDropUnownedKeepsAPartitionAssignedAgain(t *testing.T) {
	c := newBareNoop(t, Tracked, ByPartition) // the mode plays no part in dropUnowned
	old0, old1 := c.newPart(tp{"t", 0}), c.newPart(tp{"t", 1})
	c.d.add(old0)
	c.d.add(old1)
	held := c.d.owned() // what unowned takes before it asks
	again := c.newPart(tp{"t", 1})
	c.d.add(again) // t/1 assigned anew while the question was out

	c.dropUnowned(held) // the coordinator's answer assigned neither
	require.True(t, old0.closed.Load())
	require.True(t, old1.closed.Load(), "replaced by add")
	require.False(t, again.closed.Load())
	locked(c.d, func() {
		require.Equal(t, map[tp]*partState{{"t", 1}: again}, c.d.parts)
	})
}
