package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ByKey, one lane, handlers of at least 1.1 ms: keys k0, k1, k2 (offset mod 3) of partition 0 are
// all ready. A take of k0 stops after its 2nd record (takeSlice passed while the others wait), and
// its unit goes to the back: the keys take turns two records at a time, not 64 (helper-97). With
// one key alone nothing waits, and a take runs whole.
func TestASlowTakeYieldsToWaitingUnits(t *testing.T) {
	var got []string // the lane's goroutine is the test's: no lock
	c := newBareNoop(t, Tracked, ByKey)
	c.h = HandlerFunc(func(_ context.Context, d *Delivery) error {
		for start := time.Now(); time.Since(start) < takeSlice+takeSlice/10; { // work, not a wait
		}
		got = append(got, string(d.Record().Value))
		return nil
	})
	pushTo0(t, c, fetched(0, 12, 0))
	for range 6 {
		runTake(t, c)
	}
	require.Equal(t, []string{"0/0", "3/0", "1/0", "4/0", "2/0", "5/0", "6/0", "9/0", "7/0", "10/0", "8/0", "11/0"}, got)
	ps := c.d.parts[tp{"t", 0}]
	w, _ := ps.trk.Watermark()
	require.Equal(t, int64(12), w.Offset)

	got = nil
	pushTo0(t, c, fetched(12, 13, 0)) // k0 alone from here: 12
	recs := fetched(15, 22, 0)
	for _, r := range recs {
		r.Key = []byte("k0")
	}
	pushTo0(t, c, recs)
	runTake(t, c)
	require.Equal(t, []string{"12/0", "15/0", "16/0", "17/0", "18/0", "19/0", "20/0", "21/0"}, got, "nothing waits: one take")
}
