package tracker

import (
	"math/rand/v2"
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// deliverAll delivers offsets in order with epoch 0 and returns their tokens by offset.
func deliverAll(t testing.TB, p *Partition, offsets ...int64) map[int64]Delivery {
	t.Helper()
	tokens := make(map[int64]Delivery, len(offsets))
	for _, o := range offsets {
		d, err := p.Deliver(o, 0)
		require.NoError(t, err, "deliver %d", o)
		require.Equal(t, o, d.Offset())
		tokens[o] = d
	}
	return tokens
}

// span returns the offsets from..to, both included.
func span(from, to int64) []int64 {
	var out []int64
	for o := from; o <= to; o++ {
		out = append(out, o)
	}
	return out
}

// watermark returns the partition's watermark offset, failing if it has none.
func watermark(t testing.TB, p *Partition) int64 {
	t.Helper()
	wm, ok := p.Watermark()
	require.True(t, ok, "no watermark")
	return wm.Offset
}

// The committable next offset is the lowest delivered offset in flight, or the highest delivered + 1
// when none is; offsets never delivered never hold it back (DESIGN §3.1).
func TestWatermarkFollowsTheRule(t *testing.T) {
	type step struct {
		complete []int64
		results  []Result // one per completion; nil means all Completed
		want     int64
	}
	cases := []struct {
		name    string
		deliver []int64
		steps   []step
	}{
		{"a gap never blocks: deliver 0,1,3 (2 never came)", []int64{0, 1, 3}, []step{
			{complete: []int64{0}, want: 1},
			{complete: []int64{1}, want: 3},
			{complete: []int64{3}, want: 4},
		}},
		{"the lowest unfinished offset holds: deliver 10..15, complete all but 12 and 15", span(10, 15), []step{
			{complete: []int64{10, 11, 13, 14}, want: 12},
			{complete: []int64{12}, want: 15},
			{complete: []int64{15}, want: 16},
		}},
		{"completions above the oldest wait for it: deliver 3,4,5", []int64{3, 4, 5}, []step{
			{complete: []int64{4}, want: 3},
			{complete: []int64{5}, want: 3},
			{complete: []int64{3}, want: 6},
		}},
		{"out of order with a gap and a duplicate: deliver 0..3,5..8", []int64{0, 1, 2, 3, 5, 6, 7, 8}, []step{
			{complete: []int64{5, 2, 8}, want: 0},
			{complete: []int64{0}, want: 1},
			{complete: []int64{3}, want: 1},
			{complete: []int64{1}, want: 6},
			{complete: []int64{7, 7}, results: []Result{Completed, Duplicate}, want: 6},
			{complete: []int64{6}, want: 9},
		}},
		{"a single delivery: deliver 42", []int64{42}, []step{
			{complete: []int64{42}, want: 43},
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := NewPartition(64)
			tokens := deliverAll(t, p, c.deliver...)
			require.Equal(t, c.deliver[0], watermark(t, p), "before any completion")
			for _, s := range c.steps {
				for i, o := range s.complete {
					want := Completed
					if s.results != nil {
						want = s.results[i]
					}
					require.Equal(t, want, p.Complete(tokens[o]), "complete %d", o)
				}
				require.Equal(t, s.want, watermark(t, p), "after completing %v", s.complete)
			}
		})
	}
}

// A generation without deliveries has nothing to commit.
func TestNoWatermarkBeforeTheFirstDelivery(t *testing.T) {
	p := NewPartition(4)
	_, ok := p.Watermark()
	require.False(t, ok)
	_, ok = p.Moved()
	require.False(t, ok)
	_, ok = p.Oldest()
	require.False(t, ok)
	require.Equal(t, 0, p.InFlight())
	require.Equal(t, uint64(1), p.Generation())
}

// A reset (revoke or seek) clears the state; completing a delivery taken before it changes nothing.
func TestResetMakesEarlierDeliveriesStale(t *testing.T) {
	p := NewPartition(8)
	old := deliverAll(t, p, 0, 1, 2)
	require.Equal(t, Completed, p.Complete(old[0]))
	require.Equal(t, int64(1), watermark(t, p))

	p.Reset()
	require.Equal(t, uint64(2), p.Generation())
	_, ok := p.Watermark()
	require.False(t, ok, "no watermark until the new generation's first delivery")
	require.Equal(t, 0, p.InFlight())
	require.Equal(t, Stale, p.Complete(old[1]), "in flight before the reset")
	_, ok = p.Watermark()
	require.False(t, ok)

	fresh := deliverAll(t, p, 7)
	require.Equal(t, int64(7), watermark(t, p))
	require.Equal(t, Stale, p.Complete(old[2]))
	require.Equal(t, Stale, p.Complete(old[0]), "completed before the reset, completed again")
	require.Equal(t, int64(7), watermark(t, p))
	require.Equal(t, Completed, p.Complete(fresh[7]))
	require.Equal(t, int64(8), watermark(t, p))
}

// A delivery at or below the highest delivered offset is a rewind: a new generation, in which the
// pre-rewind delivery of the same offset is stale (DESIGN §3.1).
func TestRewindStartsANewGeneration(t *testing.T) {
	t.Run("the same offset delivered again", func(t *testing.T) {
		p := NewPartition(8)
		first, err := p.Deliver(5, 0)
		require.NoError(t, err)
		wm, ok := p.Moved()
		require.True(t, ok)
		require.Equal(t, int64(5), wm.Offset)

		second, err := p.Deliver(5, 0)
		require.NoError(t, err)
		require.Equal(t, uint64(2), p.Generation())
		require.NotEqual(t, first, second)
		wm, ok = p.Moved()
		require.True(t, ok, "a new generation's first watermark is reported even if equal")
		require.Equal(t, int64(5), wm.Offset)

		require.Equal(t, Stale, p.Complete(first))
		require.Equal(t, int64(5), watermark(t, p))
		_, ok = p.Moved()
		require.False(t, ok, "a stale completion moves nothing")
		require.Equal(t, 1, p.InFlight())

		require.Equal(t, Completed, p.Complete(second))
		wm, ok = p.Moved()
		require.True(t, ok)
		require.Equal(t, Watermark{Offset: 6}, wm)
	})
	t.Run("a lower offset", func(t *testing.T) {
		p := NewPartition(8)
		old := deliverAll(t, p, 5, 6, 7)
		require.Equal(t, Completed, p.Complete(old[5]))
		wm, ok := p.Moved()
		require.True(t, ok)
		require.Equal(t, int64(6), wm.Offset)

		again := deliverAll(t, p, 3, 4)
		require.Equal(t, uint64(2), p.Generation())
		wm, ok = p.Moved()
		require.True(t, ok, "reported although lower than the last report")
		require.Equal(t, int64(3), wm.Offset)
		require.Equal(t, 2, p.InFlight())
		for _, o := range []int64{5, 6, 7} {
			require.Equal(t, Stale, p.Complete(old[o]), "offset %d", o)
		}
		require.Equal(t, Completed, p.Complete(again[3]))
		require.Equal(t, Completed, p.Complete(again[4]))
		require.Equal(t, int64(5), watermark(t, p))
	})
}

// A rewind above a delivery still in flight (franz-go resuming at a truncated log's new end, above
// records still running) leaves the deliveries below its offset in flight, holding the watermark:
// nothing delivers them again. Those at or above it are delivered again, and their earlier
// deliveries are stale (helper-87: the watermark jumped from 3 to 6 while 3 ran).
func TestRewindAboveARecordInFlightKeepsItInFlight(t *testing.T) {
	p := NewPartition(32)
	old := deliverAll(t, p, span(0, 9)...)
	for _, o := range []int64{0, 1, 2, 4} {
		require.Equal(t, Completed, p.Complete(old[o]))
	}
	wm, ok := p.Moved()
	require.True(t, ok)
	require.Equal(t, int64(3), wm.Offset)

	again, err := p.Deliver(6, 1)
	require.NoError(t, err)
	require.Equal(t, uint64(2), p.Generation())
	_, ok = p.Moved()
	require.False(t, ok, "3 still holds the watermark")
	require.Equal(t, int64(3), watermark(t, p))
	require.Equal(t, 3, p.InFlight(), "3 and 5 kept, 6 delivered again; 7..9 dead")
	for _, o := range []int64{6, 7, 8, 9} {
		require.Equal(t, Stale, p.Complete(old[o]), "offset %d: delivered again", o)
	}
	require.Equal(t, int64(3), watermark(t, p))

	require.Equal(t, Completed, p.Complete(old[3]))
	require.Equal(t, Watermark{Offset: 5}, mustMoved(t, p), "5 is still in flight")
	require.Equal(t, Completed, p.Complete(old[5]))
	require.Equal(t, Watermark{Offset: 6, Epoch: 1}, mustMoved(t, p), "past the dead deliveries, to 6's new one")
	require.Equal(t, Stale, p.Complete(old[5]), "completed before, and of an earlier generation")
	require.Equal(t, Completed, p.Complete(again))
	require.Equal(t, Watermark{Offset: 7, Epoch: 1}, mustMoved(t, p))

	t.Run("a rewind at or below every delivery in flight is a Reset", func(t *testing.T) {
		p := NewPartition(8)
		old := deliverAll(t, p, 3, 4, 5)
		_, err := p.Deliver(3, 1)
		require.NoError(t, err)
		require.Equal(t, 1, p.InFlight())
		require.Equal(t, Stale, p.Complete(old[3]))
		require.Equal(t, int64(3), watermark(t, p))
	})
	t.Run("no room for the delivery: refused, nothing changed", func(t *testing.T) {
		p := NewPartition(3)
		old := deliverAll(t, p, 0, 1, 2)
		_, err := p.Deliver(1, 0)
		require.ErrorIs(t, err, ErrFull)
		require.Equal(t, uint64(1), p.Generation())
		require.Equal(t, 3, p.InFlight())
		require.Equal(t, Completed, p.Complete(old[2]), "not killed")
	})
}

// A rewind's completer race: the kept delivery completes between the rewind's keep check and its
// kill scan, and its completer moves the head up to a slot the scan then kills. The rewind moves
// the head past it itself; nobody else would, and Span would count it with nothing in flight
// (helper-89).
func TestRewindMovesTheHeadPastASlotItKilled(t *testing.T) {
	p := NewPartition(3) // a ring of 4
	ds := deliverAll(t, p, 1, 2, 3)
	require.Equal(t, Completed, p.CompleteDeferred(ds[1])) // the rewind's room check advances past it
	once := false
	p.beforeMove = func() { // after the keep check (2 in flight, below 3), before the kill scan
		if !once {
			once = true
			require.Equal(t, Completed, p.Complete(ds[2]))
		}
	}
	again, err := p.Deliver(3, 0) // 2 kept, 3 killed
	p.beforeMove = nil
	require.NoError(t, err)
	require.Equal(t, Stale, p.Complete(ds[3]))
	require.Equal(t, Completed, p.Complete(again))
	require.Equal(t, 0, p.InFlight())
	require.Equal(t, 0, p.Span(), "nothing in flight, nothing completed deferred")
}

// mustMoved returns what Moved reports, failing the test if it reports nothing.
func mustMoved(t testing.TB, p *Partition) Watermark {
	t.Helper()
	wm, ok := p.Moved()
	require.True(t, ok, "the watermark did not move")
	return wm
}

// When the ring holds its capacity (the oldest in-flight delivery and all after it), Deliver refuses
// and records nothing; completing the oldest frees room.
func TestFullRingRefusesAndRecordsNothing(t *testing.T) {
	p := NewPartition(3)
	tokens := deliverAll(t, p, 0, 1, 2)
	before, _ := p.Watermark()

	_, err := p.Deliver(3, 0)
	require.ErrorIs(t, err, ErrFull)
	after, ok := p.Watermark()
	require.True(t, ok)
	require.Equal(t, before, after)
	require.Equal(t, 3, p.InFlight())
	require.Equal(t, uint64(1), p.Generation())

	require.Equal(t, Completed, p.Complete(tokens[1]))
	_, err = p.Deliver(3, 0)
	require.ErrorIs(t, err, ErrFull, "a completion behind the oldest frees nothing")
	require.Equal(t, 2, p.InFlight())

	require.Equal(t, Completed, p.Complete(tokens[0]))
	d3, err := p.Deliver(3, 0)
	require.NoError(t, err, "the oldest completed: the head moved past 0 and 1")
	_, err = p.Deliver(4, 0)
	require.NoError(t, err)
	_, err = p.Deliver(5, 0)
	require.ErrorIs(t, err, ErrFull)
	require.Equal(t, int64(2), watermark(t, p))

	require.Equal(t, Completed, p.Complete(tokens[2]))
	require.Equal(t, Completed, p.Complete(d3))
	require.Equal(t, int64(4), watermark(t, p))
}

// A ring of one delivery still follows the rule, lap after lap.
func TestCapacityOfOne(t *testing.T) {
	p := NewPartition(1)
	for o := int64(0); o < 10; o++ {
		d, err := p.Deliver(o*2, 0)
		require.NoError(t, err)
		_, err = p.Deliver(o*2+1, 0)
		require.ErrorIs(t, err, ErrFull)
		require.Equal(t, o*2, watermark(t, p))
		require.Equal(t, Completed, p.Complete(d))
		require.Equal(t, o*2+1, watermark(t, p))
		require.Equal(t, Duplicate, p.Complete(d))
	}
}

// Moved reports each watermark once, so the runtime marks once per partition per move.
func TestMovedReportsOncePerMove(t *testing.T) {
	p := NewPartition(16)
	moved := func() (int64, bool) {
		wm, ok := p.Moved()
		return wm.Offset, ok
	}
	tokens := deliverAll(t, p, 0, 1)
	steps := []struct {
		name string
		do   func()
		want int64 // -1: no move
	}{
		{"the first delivery gives the first watermark", func() {}, 0},
		{"asking again reports nothing", func() {}, -1},
		{"a completion above the oldest moves nothing", func() { p.Complete(tokens[1]) }, -1},
		{"completing the oldest moves it", func() { p.Complete(tokens[0]) }, 2},
		{"a contiguous delivery keeps the same offset", func() { tokens[2] = deliverAll(t, p, 2)[2] }, -1},
		{"its completion moves it", func() { p.Complete(tokens[2]) }, 3},
		{"a delivery after a gap moves it to the delivered offset", func() { tokens[9] = deliverAll(t, p, 9)[9] }, 9},
		{"two moves between reports are reported once, as the latest", func() {
			tokens[10] = deliverAll(t, p, 10)[10]
			p.Complete(tokens[9])
			p.Complete(tokens[10])
		}, 11},
		{"a reset reports nothing until a delivery", func() { p.Reset() }, -1},
		{"the new generation's first watermark is reported though lower", func() { deliverAll(t, p, 4) }, 4},
	}
	for _, s := range steps {
		s.do()
		got, ok := moved()
		if s.want < 0 {
			require.False(t, ok, "%s: got %d", s.name, got)
			continue
		}
		require.True(t, ok, s.name)
		require.Equal(t, s.want, got, s.name)
	}
}

// The watermark carries the leader epoch of the record it came from (DESIGN §3.11: never invented).
func TestWatermarkCarriesTheRecordsEpoch(t *testing.T) {
	p := NewPartition(8)
	d0, err := p.Deliver(0, 3)
	require.NoError(t, err)
	d1, err := p.Deliver(1, 4)
	require.NoError(t, err)
	cases := []struct {
		name string
		do   func()
		want Watermark
	}{
		{"in flight: the delivery at the watermark", func() {}, Watermark{0, 3}},
		{"the next in flight after a completion", func() { p.Complete(d0) }, Watermark{1, 4}},
		{"nothing in flight: the highest delivered", func() { p.Complete(d1) }, Watermark{2, 4}},
		{"a contiguous delivery in flight: its own epoch", func() { _, _ = p.Deliver(2, 5) }, Watermark{2, 5}},
		{"an unknown epoch is carried as given", func() { p.Reset(); _, _ = p.Deliver(7, -1) }, Watermark{7, -1}},
	}
	for _, c := range cases {
		c.do()
		wm, ok := p.Watermark()
		require.True(t, ok, c.name)
		require.Equal(t, c.want, wm, c.name)
	}
}

// Oldest and InFlight describe what still holds the partition back.
func TestOldestAndInFlight(t *testing.T) {
	p := NewPartition(8)
	tokens := deliverAll(t, p, 4, 5, 9)
	oldest := func() int64 {
		o, ok := p.Oldest()
		require.True(t, ok)
		return o
	}
	require.Equal(t, int64(4), oldest())
	require.Equal(t, 3, p.InFlight())
	p.Complete(tokens[5])
	require.Equal(t, int64(4), oldest())
	require.Equal(t, 2, p.InFlight())
	p.Complete(tokens[4])
	require.Equal(t, int64(9), oldest())
	require.Equal(t, 1, p.InFlight())
	p.Complete(tokens[9])
	_, ok := p.Oldest()
	require.False(t, ok)
	require.Equal(t, 0, p.InFlight())
	require.Equal(t, int64(10), watermark(t, p))
}

// Tokens that were never delivered here change nothing.
func TestCompleteOfTheZeroDeliveryIsStale(t *testing.T) {
	p := NewPartition(4)
	require.Equal(t, Stale, p.Complete(Delivery{}))
	deliverAll(t, p, 1)
	require.Equal(t, Stale, p.Complete(Delivery{}))
	require.Equal(t, int64(1), watermark(t, p))
	require.Equal(t, int64(0), Delivery{}.Offset())
}

// Many laps of the ring keep sequence numbers and slots apart.
func TestManyLapsOfTheRing(t *testing.T) {
	p := NewPartition(5)
	var held []Delivery
	for o := int64(0); o < 1000; o++ {
		d, err := p.Deliver(o, int32(o/100))
		if err != nil {
			require.ErrorIs(t, err, ErrFull)
			// complete newest first: the watermark stays at the oldest until it goes
			for i := len(held) - 1; i >= 0; i-- {
				require.Equal(t, held[0].Offset(), watermark(t, p))
				require.Equal(t, Completed, p.Complete(held[i]))
			}
			require.Equal(t, Duplicate, p.Complete(held[0]))
			held = held[:0]
			require.Equal(t, o, watermark(t, p))
			d, err = p.Deliver(o, int32(o/100))
			require.NoError(t, err)
		}
		held = append(held, d)
	}
}

func TestResultString(t *testing.T) {
	require.Equal(t, "completed", Completed.String())
	require.Equal(t, "stale", Stale.String())
	require.Equal(t, "duplicate", Duplicate.String())
	require.Equal(t, "Result(0)", Result(0).String())
}

func TestCapacityBelowOnePanics(t *testing.T) {
	require.Panics(t, func() { NewPartition(0) })
	require.Panics(t, func() { New(-1) })
}

// Span counts the ring slots in use: from the oldest delivery in flight to the newest, completed
// ones behind it included; it drops when the oldest completes.
func TestSpanCountsFromTheOldestInFlight(t *testing.T) {
	p := NewPartition(8)
	var ds []Delivery
	for off := range int64(5) {
		d, err := p.Deliver(off, 0)
		require.NoError(t, err)
		ds = append(ds, d)
	}
	require.Equal(t, 5, p.Span())
	for _, d := range ds[1:] {
		require.Equal(t, Completed, p.Complete(d))
	}
	require.Equal(t, 5, p.Span(), "offset 0 still holds the ring")
	require.Equal(t, 1, p.InFlight())
	require.Equal(t, Completed, p.Complete(ds[0]))
	require.Equal(t, 0, p.Span())
	p.Reset()
	require.Equal(t, 0, p.Span())
}

// CompleteDeferred completes at once but leaves the watermark's move to Advance: Span still counts
// the deferred deliveries, Advance moves past them once and reports it, a reader (Watermark) moves
// past them itself, and Complete of the oldest delivery passes the deferred ones behind it.
func TestCompleteDeferredMovesTheWatermarkAtAdvance(t *testing.T) {
	p := NewPartition(8)
	ds := deliverAll(t, p, span(0, 5)...)
	for o := range int64(3) {
		require.Equal(t, Completed, p.CompleteDeferred(ds[o]))
	}
	require.Equal(t, Duplicate, p.CompleteDeferred(ds[1]))
	require.Equal(t, 6, p.Span(), "nothing advanced yet")
	require.Equal(t, 3, p.InFlight())
	require.True(t, p.Advance())
	require.Equal(t, 3, p.Span())
	require.False(t, p.Advance(), "nothing more to move past")

	require.Equal(t, Completed, p.CompleteDeferred(ds[3]))
	require.Equal(t, int64(4), watermark(t, p), "a reader moves past a deferred completion")
	require.Equal(t, 2, p.Span())

	require.Equal(t, Completed, p.CompleteDeferred(ds[5]))
	require.Equal(t, Completed, p.Complete(ds[4]), "the oldest, completed at once")
	require.Equal(t, 0, p.Span(), "its Complete passed the deferred one behind it")
	require.Equal(t, int64(6), watermark(t, p))
}

// A Deliver that finds the ring full of deliveries CompleteDeferred completed moves past them
// instead of refusing: the ring is full only of deliveries in flight.
func TestDeliverMovesPastDeferredCompletionsBeforeRefusing(t *testing.T) {
	p := NewPartition(4)
	ds := deliverAll(t, p, span(0, 3)...)
	_, err := p.Deliver(4, 0)
	require.ErrorIs(t, err, ErrFull)
	for o := range int64(3) {
		require.Equal(t, Completed, p.CompleteDeferred(ds[o]))
	}
	d, err := p.Deliver(4, 0)
	require.NoError(t, err)
	require.Equal(t, int64(4), d.Offset())
	require.Equal(t, 2, p.Span(), "3 and 4 in flight")
	_, err = p.Deliver(5, 0)
	require.NoError(t, err)
	_, err = p.Deliver(6, 0)
	require.NoError(t, err)
	_, err = p.Deliver(7, 0)
	require.ErrorIs(t, err, ErrFull, "4 in flight: 3, 4, 5, 6")
}

// Lanes complete takes with CompleteDeferred and call Advance once per take (one take in four uses
// Complete), and nothing reads (Watermark, Moved, Oldest) until the end, so only Advance and
// Deliver move the head. The ring is small, so slots are reused all the time, and the deliverer
// resets and rewinds now and then. Once every lane is done, Span is 0 before any reader runs: no
// deferred completion was left behind, which rests on advance looking again after a move
// (helper-68).
func TestDeferredCompletionsAreNeverLeftBehind(t *testing.T) {
	for round := range 10 {
		p := NewPartition(8)
		inbox := make(chan []Delivery, 4)
		var wg sync.WaitGroup
		for w := range 3 {
			wg.Go(func() {
				rng := rand.New(rand.NewPCG(uint64(w), uint64(round)))
				for take := range inbox {
					complete := p.CompleteDeferred
					if rng.IntN(4) == 0 {
						complete = p.Complete
					}
					for _, d := range take {
						complete(d)
						if rng.IntN(8) == 0 {
							runtime.Gosched()
						}
					}
					p.Advance()
				}
			})
		}
		rng := rand.New(rand.NewPCG(9, uint64(round)))
		var off int64
		var take []Delivery
		flush := func() {
			if len(take) > 0 {
				inbox <- take
				take = nil
			}
		}
		for i := range 50_000 {
			if rng.IntN(5000) == 0 {
				if rng.IntN(2) == 0 {
					p.Reset()
				} else {
					off = max(off-int64(rng.IntN(5)), 0) // a rewind, or the highest again
				}
			}
			d, err := p.Deliver(off, 0)
			deadline := time.Now().Add(10 * time.Second)
			for err != nil {
				flush()
				runtime.Gosched()
				require.False(t, time.Now().After(deadline), "round %d, delivery %d: ErrFull for 10 s: span %d, in flight %d", round, i, p.Span(), p.InFlight())
				d, err = p.Deliver(off, 0)
			}
			off++
			if take = append(take, d); len(take) == 1+rng.IntN(4) {
				flush()
			}
		}
		flush()
		close(inbox)
		wg.Wait()
		require.Equal(t, 0, p.Span(), "round %d: a deferred completion was left behind (in flight %d)", round, p.InFlight())
		require.Equal(t, off, watermark(t, p), "round %d", round)
	}
}

// Deliveries, Complete, CompleteDeferred, Advance and Reset in random order against a model, with
// no reader between the steps: Deliver refuses exactly when the deliveries from the oldest in flight
// fill the capacity, Span after Advance is that count, Span is never below it (the head never
// passes a delivery in flight), and InFlight is exact (helper-68).
func TestDeferredCompletionsAgainstAModel(t *testing.T) {
	for seed := range 500 {
		rng := rand.New(rand.NewPCG(uint64(seed), 77))
		capacity := 1 + rng.IntN(9)
		p := NewPartition(capacity)
		type delivery struct {
			d    Delivery
			done bool
		}
		var ds []delivery // this generation's
		var off int64
		span := func() int { // from the oldest in flight to the newest
			for i, x := range ds {
				if !x.done {
					return len(ds) - i
				}
			}
			return 0
		}
		for step := range 300 {
			switch op := rng.IntN(10); {
			case op < 4:
				d, err := p.Deliver(off, 0)
				full := span() >= capacity
				require.Equal(t, full, err != nil, "seed %d step %d: deliver (span %d, Span %d): %v", seed, step, span(), p.Span(), err)
				if err == nil {
					ds = append(ds, delivery{d: d})
					off++
				}
			case op < 8:
				var open []int
				for i, x := range ds {
					if !x.done {
						open = append(open, i)
					}
				}
				if len(open) == 0 {
					continue
				}
				i := open[rng.IntN(len(open))]
				ds[i].done = true
				complete := p.Complete
				if op < 6 {
					complete = p.CompleteDeferred
				}
				require.Equal(t, Completed, complete(ds[i].d), "seed %d step %d", seed, step)
			case op == 8:
				p.Advance()
				require.Equal(t, span(), p.Span(), "seed %d step %d: span after Advance", seed, step)
			default:
				if rng.IntN(3) == 0 {
					p.Reset()
					ds = nil
				}
			}
			n := 0
			for _, x := range ds {
				if !x.done {
					n++
				}
			}
			require.Equal(t, n, p.InFlight(), "seed %d step %d: in flight", seed, step)
			require.GreaterOrEqual(t, p.Span(), span(), "seed %d step %d: the head passed a delivery in flight", seed, step)
		}
	}
}

// The slot completed while another goroutine moves the head up to it is not left behind: the
// mover looks again from the new head. Here the holder of the oldest delivery (0) completes it and
// scans up to 1, still in flight; before its compare-and-swap, delivery 1 completes (Complete sees
// the head at 0, below its slot, so it leaves the move to the mover). Without the second look the
// head stopped at 1, completed, and Span kept counting it until some later move or read.
func TestAMoverLooksAgainPastASlotCompletedDuringItsMove(t *testing.T) {
	p := NewPartition(8)
	ds := deliverAll(t, p, span(0, 2)...)
	once := false
	p.beforeMove = func() {
		if !once {
			once = true
			require.Equal(t, Completed, p.Complete(ds[1]))
		}
	}
	require.Equal(t, Completed, p.Complete(ds[0]))
	p.beforeMove = nil
	require.Equal(t, 1, p.Span(), "only 2 is in flight")
	require.Equal(t, int64(2), watermark(t, p))
}

// A second completion that read its slot's word while the delivery was in flight, and looks at the
// slot's offset only after the first completion moved the head and a later delivery took the slot,
// is a Duplicate (completed in this generation), not Stale: the offset it finds is the later
// delivery's (helper-78: about 1 in 8,000 racing second completions said Stale). A token of
// another Partition, with d2's sequence number and another offset, is Stale while d2 is in flight.
func TestASecondCompletionRacingTheSlotsReuseIsADuplicate(t *testing.T) {
	p := NewPartition(1) // a ring of two slots: the third delivery reuses the first one's
	d0, err := p.Deliver(0, 0)
	require.NoError(t, err)
	slot := &p.ring[d0.seq&p.mask]
	w := slot.word.Load() // the loser's read: d0 in flight

	require.Equal(t, Completed, p.Complete(d0)) // the winner; the head moves past d0
	d1, err := p.Deliver(1, 0)
	require.NoError(t, err)
	require.Equal(t, Completed, p.Complete(d1))
	d2, err := p.Deliver(2, 0) // d0's slot, offset 2
	require.NoError(t, err)
	require.Equal(t, d0.seq&p.mask, d2.seq&p.mask)

	require.Equal(t, Duplicate, p.completeFrom(d0, w, true))
	require.Equal(t, Duplicate, p.completeFrom(d0, w, false))
	require.Equal(t, Duplicate, p.Complete(d0))

	foreign := d2
	foreign.offset = 9 // another Partition's token with d2's sequence number
	require.Equal(t, Stale, p.Complete(foreign))
	w2, ok := p.Watermark()
	require.True(t, ok)
	require.Equal(t, int64(2), w2.Offset, "d2 still in flight")
	require.Equal(t, Completed, p.Complete(d2))
}
