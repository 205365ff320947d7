package runtime

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Unordered: a take of three records of partitions 0 and 1 stops after the first. The two it did
// not handle go back each to its own unit, not both to the first one's, whose partition would
// then count the other's record as its own in a handler (grabLocked counts by unit): ps.handling
// and ps.held would not drain, and a revoke of either partition would leave d.held wrong for good
// (helper-96 saw TestDispatcherInvariantsUnderAbortsAndRevokes stop with d.held at 1).
func TestUnhandledRecordsGoBackToTheirOwnUnits(t *testing.T) {
	c := newBareNoop(t, Auto, Unordered)
	for p := range int32(2) {
		_, _, err := c.d.pushPart("t", p, []*kgo.Record{{Topic: "t", Partition: p, Offset: 0}, {Topic: "t", Partition: p, Offset: 1}})
		require.NoError(t, err)
	}
	var items []*item
	locked(c.d, func() { items = c.d.grabLocked(nil, 3) })
	require.Len(t, items, 3)
	require.NotEqual(t, items[1].ps, items[2].ps, "the take spans both partitions")
	handled := []string{fmt.Sprintf("%d/%d", items[0].ps.partition, items[0].off)}
	c.d.finishTake(items, 1, 0)
	for {
		locked(c.d, func() { items = c.d.grabLocked(nil, 1) })
		if len(items) == 0 {
			break
		}
		locked(c.d, func() {
			for _, ps := range c.d.parts {
				require.Equal(t, ps == items[0].ps, ps.handling == 1, "partition %d counts the record in the handler", ps.partition)
			}
		})
		handled = append(handled, fmt.Sprintf("%d/%d", items[0].ps.partition, items[0].off))
		c.d.finishTake(items, 1, 0)
	}
	require.ElementsMatch(t, []string{"0/0", "0/1", "1/0", "1/1"}, handled)
	locked(c.d, func() {
		require.Zero(t, c.d.held)
		require.Zero(t, c.d.handling)
		for _, ps := range c.d.parts {
			require.Zero(t, ps.held, "partition %d", ps.partition)
			require.Zero(t, ps.handling, "partition %d", ps.partition)
		}
	})
}
