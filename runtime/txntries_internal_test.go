package runtime

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// forgetTxnTries drops the failed-delivery counts of offsets below the committed ones, and all of
// a partition no longer owned (helper-87: a revoked partition's counts were kept for good, and
// would apply again if it came back, or to a topic created again under its name).
func TestForgetTxnTriesDropsSettledOffsetsAndPartitionsNoLongerOwned(t *testing.T) {
	// A Transactional consumer needs a group's session; the counts do not depend on the mode.
	c := newBare(t, Tracked, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	owned := c.d.parts[tp{"t", 0}]
	gone := c.newPart(tp{"gone", 0}) // never added to the dispatcher: not owned
	cause := errors.New("boom")
	for _, it := range []*item{{ps: owned, off: 4}, {ps: owned, off: 7}, {ps: owned, off: 7}, {ps: gone, off: 1}} {
		c.countTxnTry(it, it.off == 7, cause)
	}
	require.Equal(t, map[tp]map[int64]int{{"t", 0}: {4: 1, 7: 2}, {"gone", 0}: {1: 1}}, c.txnTried)

	c.forgetTxnTries(map[string]map[int32]kgo.EpochOffset{"t": {0: {Offset: 5}}})
	require.Equal(t, map[tp]map[int64]int{{"t", 0}: {7: 2}}, c.txnTried)
	require.Equal(t, map[tp]map[int64]error{{"t", 0}: {7: cause}}, c.txnGone)

	c.forgetTxnTries(map[string]map[int32]kgo.EpochOffset{"t": {0: {Offset: 8}}})
	require.Empty(t, c.txnTried)
	require.Empty(t, c.txnGone)
}
