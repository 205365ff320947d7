package runtime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Tracked, ByPartition: 5/0 fails once and waits, parked at its unit's head, an hour for its
// in-place retry when the partition is fetched again from 3. The rewind drops it (and 6/0, 7/0
// behind it): the unit is ready at once for 3/1..7/1, and the stale 5/0 never runs again (found by
// helper-93: it ran beside its new copy, out of offset order, once fallen due; failing for good,
// it would have retried in place at the head for ever. helper-94: until due, the rewound records
// waited behind it for its backoff).
func TestARewindDropsAParkedRetry(t *testing.T) {
	var mu sync.Mutex
	var got []string
	failed := false
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		mu.Lock()
		defer mu.Unlock()
		v := string(d.Record().Value)
		if v == "5/0" && !failed {
			failed = true
			return Retry(errors.New("once"))
		}
		got = append(got, v)
		return nil
	})
	c := newBareRetrying(t, ByPartition, h)
	pushTo0(t, c, fetched(0, 8, 0))
	runTake(t, c) // 0..5: 5/0 parks for its in-place retry; 6/0, 7/0 go back behind it
	ps := c.d.parts[tp{"t", 0}]
	locked(c.d, func() {
		require.Len(t, c.d.parked, 1)
		require.Zero(t, c.d.readyLen(), "the partition's unit waits behind the parked 5/0")
	})
	pushTo0(t, c, fetched(3, 8, 1))
	locked(c.d, func() {
		require.Empty(t, c.d.parked, "5/0 is parked no more")
		require.Equal(t, 5, ps.held, "3/1..7/1")
		require.Equal(t, 1, c.d.readyLen(), "the unit waits for no backoff")
	})
	runTake(t, c)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"0/0", "1/0", "2/0", "3/0", "4/0", "3/1", "4/1", "5/1", "6/1", "7/1"}, got)
	w, _ := ps.trk.Watermark()
	require.Equal(t, int64(8), w.Offset)
}

// Tracked: 5/0 asks for an in-place retry while, in its handler, the partition is fetched again from 3: it
// returns stale, so it is dropped, not parked for a backoff at the head of 3/1..7/1.
func TestAStaleRetryIsNotParked(t *testing.T) {
	var c *consumer
	var got []string // the lane's goroutine is the test's: no lock
	h := HandlerFunc(func(_ context.Context, d *Delivery) error {
		v := string(d.Record().Value)
		if v == "5/0" {
			if _, _, err := c.d.pushPart("t", 0, fetched(3, 8, 1)); err != nil {
				return err
			}
			return Retry(errors.New("once"))
		}
		got = append(got, v)
		return nil
	})
	c = newBareRetrying(t, ByPartition, h)
	pushTo0(t, c, fetched(5, 6, 0))
	runTake(t, c)
	locked(c.d, func() {
		require.Empty(t, c.d.parked, "the stale 5/0 is not parked")
		require.Equal(t, 5, c.d.parts[tp{"t", 0}].held, "3/1..7/1")
		require.Equal(t, 1, c.d.readyLen())
	})
	runTake(t, c)
	require.Equal(t, []string{"3/1", "4/1", "5/1", "6/1", "7/1"}, got)
}

// A batch handler's take grabbed just before a rewind at 2 (ByPartition): its stale elements
// (2/0, 3/0) are dropped, not handled; the handler gets 0/0 and 1/0, then 2/1 and 3/1.
func TestABatchSkipsItsStaleElements(t *testing.T) {
	var got [][]string
	c := newBareNoop(t, Tracked, ByPartition)
	c.bh = BatchHandlerFunc(func(_ context.Context, ds []*Delivery) []error {
		var vs []string
		for _, d := range ds {
			vs = append(vs, string(d.Record().Value))
		}
		got = append(got, vs)
		return make([]error, len(ds))
	})
	pushTo0(t, c, fetched(0, 4, 0))
	var items []*item
	locked(c.d, func() { items = c.d.grabLocked(nil, 8) })
	require.Len(t, items, 4)
	pushTo0(t, c, fetched(2, 4, 1))
	for {
		var running []*item
		c.handleBatch(items, &running)
		c.markBatch(items)
		c.d.finishTake(items, len(items), 0)
		locked(c.d, func() { items = c.d.grabLocked(nil, 8) })
		if len(items) == 0 {
			break
		}
	}
	require.Equal(t, [][]string{{"0/0", "1/0"}, {"2/1", "3/1"}}, got)
	ps := c.d.parts[tp{"t", 0}]
	locked(c.d, func() { require.Zero(t, ps.held) })
	w, _ := ps.trk.Watermark()
	require.Equal(t, int64(4), w.Offset, "every record of the final log completed once")
}

// runTake runs one lane's take, as lane runs it, without waiting for one: there must be one.
func runTake(t *testing.T, c *consumer) {
	t.Helper()
	var items []*item
	locked(c.d, func() { items = c.d.grabLocked(nil, laneTake) })
	require.NotEmpty(t, items)
	var dl Delivery
	var running []*item
	c.d.finishTake(items, c.handleTake(items, &dl, &running), 0)
}

// Tracked, ByKey: 6/0 (key a) is in its handler when the partition is fetched again from 5, then
// from 7 (later times), and its handler asks for an in-place retry. After one rewind from 7, 6/0
// is stale by the one from 5 (partState.stale keeps every rewind since its admission): it is
// dropped, not parked, and 5/1, 6/1, 7/2 run. After keptRewinds of them, the rewind from 5 is
// forgotten, 6/0 is told stale by none, and its retry parks it at the head of a's unit, before 5/1
// and 6/1 (helper-96's case, then with two rewinds). Either way a last rewind, from 6, whose
// record has another key (the log was truncated and written anew), drops what is at or above 6:
// a's unit, holding 5/1 still, must be ready again, not left unparked and unlisted, 5/1 never to
// run (and held for good).
func TestARecordStaleByAnEarlierRewindIsToldApart(t *testing.T) {
	for _, later := range []int{1, keptRewinds} {
		t.Run(fmt.Sprint(later), func(t *testing.T) {
			rec := func(off int64, key string, rewinds int) *kgo.Record {
				return &kgo.Record{Topic: "t", Partition: 0, Offset: off, Key: []byte(key),
					Value: fmt.Appendf(nil, "%d/%d", off, rewinds)}
			}
			var c *consumer
			var got []string // the lane's goroutine is the test's: no lock
			h := HandlerFunc(func(_ context.Context, d *Delivery) error {
				v := string(d.Record().Value)
				if v == "6/0" {
					recs := []*kgo.Record{rec(5, "a", 1), rec(6, "a", 1), rec(7, "a", 1), rec(8, "a", 1)} // from 5
					if _, _, err := c.d.pushPart("t", 0, recs); err != nil {
						return err
					}
					for n := range later { // from 7
						if _, _, err := c.d.pushPart("t", 0, []*kgo.Record{rec(7, "a", 2+n)}); err != nil {
							return err
						}
					}
					return Retry(errors.New("once"))
				}
				got = append(got, v)
				return nil
			})
			c = newBareRetrying(t, ByKey, h)
			pushTo0(t, c, []*kgo.Record{rec(6, "a", 0)})
			runTake(t, c)
			ps := c.d.parts[tp{"t", 0}]
			locked(c.d, func() {
				if later == 1 {
					require.Empty(t, c.d.parked, "6/0, stale by the rewind from 5, is not parked for its retry")
					require.Equal(t, 3, ps.held, "5/1, 6/1, 7/2")
				} else {
					require.Len(t, c.d.parked, 1, "6/0, stale by a forgotten rewind only, parks for its retry")
					require.Equal(t, 4, ps.held, "6/0 parked; 5/1, 6/1 and the last 7 behind it")
				}
			})
			last := fmt.Sprintf("6/%d", later+2)
			pushTo0(t, c, []*kgo.Record{{Topic: "t", Partition: 0, Offset: 6, Key: []byte("b"), Value: []byte(last)}})
			locked(c.d, func() {
				require.Empty(t, c.d.parked)
				require.Equal(t, 2, ps.held, "5/1 and "+last)
			})
			for {
				var items []*item
				locked(c.d, func() { items = c.d.grabLocked(nil, laneTake) })
				if len(items) == 0 {
					break
				}
				var dl Delivery
				var running []*item
				c.d.finishTake(items, c.handleTake(items, &dl, &running), 0)
			}
			require.ElementsMatch(t, []string{"5/1", last}, got)
			locked(c.d, func() {
				require.Zero(t, ps.held)
				require.Empty(t, ps.keys)
			})
		})
	}
}

// newBareRetrying is newBare in Tracked (Auto refuses in-place retries) with ordering, a backoff
// of an hour for every in-place retry (a test sees a retry parked until the rewind drops it), and
// stopped at the end.
func newBareRetrying(t *testing.T, ordering Ordering, h Handler) *consumer {
	c := newBare(t, Tracked, h)
	c.cfg.ordering, c.d.ordering = ordering, ordering
	c.cfg.backoff = func(int, error) time.Duration { return time.Hour }
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	return c
}
