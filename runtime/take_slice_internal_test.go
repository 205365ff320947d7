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

// ByKey, one lane, handlers of at least 1.1 ms: k0 alone has 20 records ready, and k1's record
// comes while k0's 10th runs, past the 8th record's check. The take stops after that 10th record
// (takeSlice passed long before) and k1 runs next. The slice's clock started only at a check that
// saw a unit waiting, and was read only at those checks, so k1 waited for all 20 (helper-118: up
// to 56 records of 20 ms).
func TestAUnitThatComesLateStopsASlowTakeAtTheNextRecord(t *testing.T) {
	var got []string // the lane's goroutine is the test's: no lock
	c := newBareNoop(t, Tracked, ByKey)
	c.h = HandlerFunc(func(_ context.Context, d *Delivery) error {
		for start := time.Now(); time.Since(start) < takeSlice+takeSlice/10; { // work, not a wait
		}
		got = append(got, string(d.Record().Value))
		if len(got) == 10 {
			pushTo0(t, c, []*kgo.Record{{Topic: "t", Offset: 20, Key: []byte("k1"), Value: []byte("20/0")}})
		}
		return nil
	})
	recs := fetched(0, 20, 0)
	for _, r := range recs {
		r.Key = []byte("k0")
	}
	pushTo0(t, c, recs)
	runTake(t, c)
	require.Len(t, got, 10, "the take stops after the record during which k1 came")
	runTake(t, c)
	require.Equal(t, "20/0", got[10], "k1 runs next")
}

// ByKey, one lane: k0 has 64 records ready, the first 34 fast and the rest of at least 1.1 ms, and
// k1's record comes while the first slow one runs. The clock read after the 48th record finds the
// slice passed, and the take stops there (helper-119: with no reading after the 32nd, all 64 ran
// first).
func TestATakeThatTurnsSlowLateStillYields(t *testing.T) {
	var got []string // the lane's goroutine is the test's: no lock
	c := newBareNoop(t, Tracked, ByKey)
	c.h = HandlerFunc(func(_ context.Context, d *Delivery) error {
		got = append(got, string(d.Record().Value))
		if len(got) <= 34 {
			return nil
		}
		for start := time.Now(); time.Since(start) < takeSlice+takeSlice/10; { // work, not a wait
		}
		if len(got) == 35 {
			pushTo0(t, c, []*kgo.Record{{Topic: "t", Offset: 64, Key: []byte("k1"), Value: []byte("64/0")}})
		}
		return nil
	})
	recs := fetched(0, 64, 0)
	for _, r := range recs {
		r.Key = []byte("k0")
	}
	pushTo0(t, c, recs)
	runTake(t, c)
	require.Len(t, got, 48, "the take stops at the first reading after its records turned slow")
	runTake(t, c)
	require.Equal(t, "64/0", got[48], "k1 runs next")
}
