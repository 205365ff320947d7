package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
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

// lateUnit runs, on one lane under ByKey, a take of k0's n records, the first fast of them doing
// no work and the rest at least 1.1 ms each, while k1's one record comes as k0's pushAt-th runs. It
// returns how many of k0's records the take ran, and what the next take ran first.
func lateUnit(t *testing.T, n, fast, pushAt int) (ran int, next string) {
	var got []string // the lane's goroutine is the test's: no lock
	c := newBareNoop(t, Tracked, ByKey)
	c.h = HandlerFunc(func(_ context.Context, d *Delivery) error {
		got = append(got, string(d.Record().Value))
		for start := time.Now(); len(got) > fast && time.Since(start) < takeSlice+takeSlice/10; { // work, not a wait
		}
		if len(got) == pushAt {
			pushTo0(t, c, []*kgo.Record{{Topic: "t", Offset: int64(n), Key: []byte("k1"), Value: []byte("k1")}})
		}
		return nil
	})
	recs := fetched(0, int64(n), 0)
	for _, r := range recs {
		r.Key = []byte("k0")
	}
	pushTo0(t, c, recs)
	runTake(t, c)
	ran = len(got)
	runTake(t, c)
	return ran, got[ran]
}

// k0's 20 slow records; k1's record comes while k0's 10th runs, past the 8th record's reading.
// The take stops after that 10th record (takeSlice passed long before) and k1 runs next. The
// slice's clock started only at a reading that saw a unit waiting, and was read only there, so k1
// waited for all 20 (helper-118: up to 56 records of 20 ms).
func TestAUnitThatComesLateStopsASlowTakeAtTheNextRecord(t *testing.T) {
	ran, next := lateUnit(t, 20, 0, 10)
	require.Equal(t, 10, ran, "the take stops after the record during which k1 came")
	require.Equal(t, "k1", next)
}

// k0's 64 records, the first 34 fast; k1's record comes while the first slow one runs. The
// reading after the 48th record finds the slice passed, and the take stops there (helper-119:
// with no reading after the 32nd, all 64 ran first).
func TestATakeThatTurnsSlowLateStillYields(t *testing.T) {
	ran, next := lateUnit(t, 64, 34, 35)
	require.Equal(t, 48, ran, "the take stops at the first reading after its records turned slow")
	require.Equal(t, "k1", next)
}
