package runtime

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Tracked, ByPartition: 5/0 fails once and waits, parked at its unit's head, for its in-place retry
// when the partition is fetched again from 3. Fallen due, the stale 5/0 is dropped, not run again
// before 3/1 and 4/1 (found by helper-93: it ran beside its new copy, out of offset order; failing
// for good, it would have retried in place at the head for ever, its new copies behind it).
func TestAStaleParkedRetryIsDroppedWhenDue(t *testing.T) {
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
	c := newBare(t, Tracked, h)
	c.cfg.backoff = func(int, error) time.Duration { return 20 * time.Millisecond }
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	run := func() { // one lane's take, as lane runs it
		var items []*item
		locked(c.d, func() { items = c.d.grabLocked(nil, laneTake) }) // without waiting
		require.NotEmpty(t, items)
		var dl Delivery
		var running []*item
		c.d.finishTake(items, c.handleTake(items, &dl, &running), 0)
	}
	ready := func() (n int) {
		locked(c.d, func() { n = c.d.readyLen() })
		return n
	}
	_, _, err := c.d.pushPart("t", 0, fetched(0, 8, 0))
	require.NoError(t, err)
	run() // 0..5: 5/0 parks for its in-place retry; 6/0, 7/0 go back behind it
	_, _, err = c.d.pushPart("t", 0, fetched(3, 8, 1))
	require.NoError(t, err)
	require.Zero(t, ready(), "the partition's unit waits behind the parked 5/0")
	require.Eventually(t, func() bool { return ready() > 0 }, 5*time.Second, time.Millisecond, "5/0 never fell due")
	for ready() > 0 {
		run()
	}
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"0/0", "1/0", "2/0", "3/0", "4/0", "3/1", "4/1", "5/1", "6/1", "7/1"}, got)
	w, _ := c.d.parts[tp{"t", 0}].trk.Watermark()
	require.Equal(t, int64(8), w.Offset)
}
