package runtime

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"

	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

type laneKey struct {
	ps  *partState
	key string
}

// Six lanes take and finish records concurrently (takes of 1 to 4, some cut short as a Handler's
// are) while the poll side pushes records of 5 keys and keyless ones into 150 Transactional windows,
// which lanes and the poll side abort at random (dropQueued), and partition 1 is revoked and
// assigned again now and then. Under each ordering, 6 seeds: a key (ByKey) or partition
// (ByPartition) never runs on two lanes at once and runs in offset order; no record is handled
// twice; every record of a window never aborted is handled; the counters and the unit maps drain
// to zero. Written by helper-92 to
// check the ready list's compaction and dropQueued's forgetting of key units; it fails when
// either is broken (a busy key's unit forgotten: a key runs twice at once; the compaction
// off by one: records lost).
func TestDispatcherInvariantsUnderAbortsAndRevokes(t *testing.T) {
	for _, ord := range []Ordering{ByKey, ByPartition, Unordered} {
		t.Run(fmt.Sprint(ord), func(t *testing.T) {
			for seed := range uint64(6) {
				stressDispatcher(t, ord, seed)
			}
		})
	}
}

func stressDispatcher(t *testing.T, ord Ordering, seed uint64) {
	c := newBareNoop(t, Auto, ord)
	d := c.d
	d.backlogs = false
	rng := rand.New(rand.NewPCG(seed, 1))
	var rngMu sync.Mutex
	rint := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }

	var (
		mu       sync.Mutex
		active   = map[laneKey]int{}
		lastOff  = map[laneKey]int64{}
		handled  = map[*kgo.Record]int{}
		aborted  = map[*txnWindow]bool{}
		failures []string
	)
	fail := func(format string, a ...any) {
		mu.Lock()
		if len(failures) < 20 {
			failures = append(failures, fmt.Sprintf(format, a...))
		}
		mu.Unlock()
	}
	keyOf := func(it *item) laneKey {
		switch ord {
		case ByKey:
			if it.rec.Key == nil {
				return laneKey{it.ps, "\x00single"}
			}
			return laneKey{it.ps, string(it.rec.Key)}
		case ByPartition:
			return laneKey{it.ps, ""}
		}
		return laneKey{it.ps, fmt.Sprint(it.off)}
	}

	const lanes = 6
	var wg sync.WaitGroup
	for l := range lanes {
		wg.Add(1)
		go func() {
			defer wg.Done()
			n := 1 + l%4
			items, ok := d.take(make([]*item, 0, n), n)
			for ok {
				h := len(items)
				for i, it := range items {
					k := keyOf(it)
					mu.Lock()
					active[k]++
					if active[k] > 1 && ord != Unordered {
						mu.Unlock()
						fail("key %q of %s/%d runs twice at once (off %d)", k.key, it.ps.topic, it.ps.partition, it.off)
						mu.Lock()
					}
					if lo, ok := lastOff[k]; ok && it.off <= lo && ord != Unordered {
						mu.Unlock()
						fail("key %q off %d handled after %d", k.key, it.off, lo)
						mu.Lock()
					}
					lastOff[k] = it.off
					handled[it.rec]++
					if handled[it.rec] > 1 {
						mu.Unlock()
						fail("record %d handled %d times", it.off, handled[it.rec])
						mu.Lock()
					}
					mu.Unlock()
					if rint(20) == 0 {
						time.Sleep(time.Microsecond * time.Duration(rint(50)))
					}
					mu.Lock()
					active[k]--
					mu.Unlock()
					it.act = actDone
					if rint(40) == 0 && it.win != nil {
						mu.Lock()
						aborted[it.win] = true
						mu.Unlock()
						c.abortWindow(it.win, errors.New("a lane aborts"))
						if rint(2) == 0 {
							h = i + 1 // the take stops early, as a Handler's take does
							break
						}
					}
				}
				items, ok = d.finishTake(items, h, n)
			}
		}()
	}

	// The poll loop: windows of a few pushes; keys from a small set; sometimes a detach.
	off := map[int32]int64{}
	var all []*kgo.Record
	recWin := map[*kgo.Record]*txnWindow{}
	for w := range 150 {
		tw := c.newWindow()
		d.setWindow(tw)
		for range 1 + rint(6) {
			p := int32(rint(3))
			recs := make([]*kgo.Record, 1+rint(30))
			for i := range recs {
				var key []byte
				if rint(10) != 0 {
					key = fmt.Appendf(nil, "k%d", rint(5))
				}
				recs[i] = &kgo.Record{Topic: "t", Partition: p, Offset: off[p], Key: key}
				off[p]++
				recWin[recs[i]] = tw
			}
			_, _, err := d.pushPart("t", p, recs)
			require.NoError(t, err)
			all = append(all, recs...)
			if rint(30) == 0 {
				mu.Lock()
				aborted[tw] = true
				mu.Unlock()
				c.abortWindow(tw, errors.New("the poll side aborts"))
			}
		}
		if w%37 == 36 { // a revoke and a re-assign of partition 1
			ps := d.detach(map[string][]int32{"t": {1}})
			for _, ps := range ps {
				mu.Lock()
				for r, tw := range recWin {
					if r.Partition == ps.partition {
						aborted[tw] = true // its queued records are dropped: not checked
					}
				}
				mu.Unlock()
			}
			d.add(c.newPart(tp{"t", 1}))
		}
		time.Sleep(time.Duration(rint(200)) * time.Microsecond)
	}

	// Drain.
	deadline := time.Now().Add(20 * time.Second)
	for {
		d.mu.Lock()
		held := d.held
		d.mu.Unlock()
		if held == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	d.stop()
	wg.Wait()

	mu.Lock()
	defer mu.Unlock()
	require.Empty(t, failures, "seed %d", seed)
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Zero(t, d.held, "seed %d: d.held", seed)
	require.Zero(t, d.handling, "seed %d: d.handling", seed)
	for _, ps := range d.parts {
		require.Zero(t, ps.held, "seed %d: ps.held of %d", seed, ps.partition)
		require.Zero(t, ps.handling, "seed %d", seed)
		require.Empty(t, ps.keys, "seed %d: units of keys left in partition %d", seed, ps.partition)
		require.Empty(t, ps.copies, "seed %d", seed)
	}
	missing := 0
	for _, r := range all {
		if !aborted[recWin[r]] && handled[r] == 0 {
			missing++
		}
	}
	require.Zero(t, missing, "seed %d: records of committed windows never handled", seed)
}
