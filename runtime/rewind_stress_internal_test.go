package runtime

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A poll side that fetches a partition's log in chunks and rewinds at random (a truncation: the
// log from the rewind's offset on is replaced by new records; or a reset: the same records come
// again), against 4 real lanes (handleTake) whose handler sometimes retries in place, under Auto
// and Tracked, each ordering, a small and a large MaxInFlightPerPartition, with and without MaxInFlight, 3
// seeds each. Every record of the final log is handled, the watermark (Tracked) reaches its end,
// the counters drain, the units of keys and copies are forgotten, and with resets only the committable position never passes a record not
// handled yet. Written by helper-93; it fails when stale also takes the records below the latest
// rewind's offset (records never handled, the watermark stuck).
func TestRewindsNeverLoseARecord(t *testing.T) {
	for _, trunc := range []bool{true, false} {
		for _, mode := range []CommitMode{Tracked, Auto} {
			for _, ord := range []Ordering{ByPartition, ByKey, Unordered} {
				for _, perPart := range []int{6, 1024} {
					for _, maxAll := range []int{0, 5} {
						t.Run(fmt.Sprintf("%v/%v/%v/%d/%d", trunc, mode, ord, perPart, maxAll), func(t *testing.T) {
							for seed := range uint64(3) {
								stressRewinds(t, trunc, mode, ord, perPart, maxAll, seed)
							}
						})
					}
				}
			}
		}
	}
}

func stressRewinds(t *testing.T, trunc bool, mode CommitMode, ord Ordering, perPart, maxAll int, seed uint64) {
	rng := rand.New(rand.NewPCG(seed, 2))
	var rngMu sync.Mutex
	rint := func(n int) int { rngMu.Lock(); defer rngMu.Unlock(); return rng.IntN(n) }

	var mu sync.Mutex
	handled := map[string]int{}
	h := HandlerFunc(func(ctx context.Context, d *Delivery) error {
		if rint(15) == 0 {
			time.Sleep(time.Duration(rint(300)) * time.Microsecond)
		}
		if mode == Tracked && rint(12) == 0 {
			return Retry(errors.New("again"))
		}
		mu.Lock()
		handled[string(d.Record().Value)]++
		mu.Unlock()
		return nil
	})
	c := newBare(t, mode, h)
	c.d.maxAll = maxAll
	c.cfg.ordering, c.d.ordering = ord, ord
	c.cfg.backoff = func(int, error) time.Duration { return time.Duration(rint(500)) * time.Microsecond }
	c.cfg.workers = 4
	c.d.perPart = perPart
	for range c.cfg.workers {
		c.wg.Go(c.lane)
	}
	defer func() {
		c.d.stop()
		c.wg.Wait()
		c.cl.Close()
	}()

	var logMu sync.Mutex
	var monErr []string
	stopMon := make(chan struct{})
	var stopOnce sync.Once
	stopMonitor := func() { stopOnce.Do(func() { close(stopMon) }) }
	defer stopMonitor() // an early failure leaves no monitor running
	monDone := make(chan struct{})
	var log []string // value per offset, "" for a gap (compacted)
	if !trunc && (mode == Tracked || ord == ByPartition) {
		go func() { // the committable position never passes a record not handled yet
			defer close(monDone)
			for {
				select {
				case <-stopMon:
					return
				default:
				}
				var ps *partState
				locked(c.d, func() { ps = c.d.parts[tp{"t", 0}] })
				var w int64 = -1
				if ps.trk != nil {
					if wm, ok := ps.trk.Watermark(); ok {
						w = wm.Offset
					}
				} else {
					w = ps.done.Load().next.Load()
				}
				logMu.Lock()
				mu.Lock()
				for off := int64(0); off < w && off < int64(len(log)); off++ {
					if v := log[off]; v != "" && handled[v] == 0 && len(monErr) < 5 {
						monErr = append(monErr, fmt.Sprintf("position %d passes %s, not handled", w, v))
					}
				}
				mu.Unlock()
				logMu.Unlock()
				time.Sleep(50 * time.Microsecond)
			}
		}()
	} else {
		close(monDone)
	}
	gen := 0
	appendLog := func(n int) {
		for range n {
			v := fmt.Sprintf("%d/%d", len(log), gen)
			if rint(8) == 0 {
				v = ""
			}
			logMu.Lock()
			log = append(log, v)
			logMu.Unlock()
		}
	}
	appendLog(20)
	pos := int64(0)
	fetch := func(end int64) { // pushes the log's records from pos to end, as a fetch returns them
		var recs []*kgo.Record
		for off := pos; off < end; off++ {
			if log[off] == "" {
				continue
			}
			recs = append(recs, &kgo.Record{Topic: "t", Partition: 0, Offset: off, LeaderEpoch: epochOf(log[off]),
				Key: fmt.Appendf(nil, "k%d", off%3), Value: []byte(log[off])})
		}
		pos = end
		if len(recs) > 0 {
			_, _, err := c.d.pushPart("t", 0, recs)
			require.NoError(t, err)
		}
	}
	for step := 0; step < 120; step++ {
		if rint(6) == 0 && pos > 0 {
			a := int64(rint(int(pos)))
			if trunc && rint(2) == 0 { // a truncation
				gen++
				logMu.Lock()
				log = log[:a]
				logMu.Unlock()
				appendLog(rint(10))
			}
			pos = a
		}
		if rint(3) == 0 {
			appendLog(rint(8))
		}
		if pos >= int64(len(log)) {
			time.Sleep(time.Duration(rint(200)) * time.Microsecond)
			continue
		}
		fetch(min(int64(len(log)), pos+1+int64(rint(10))))
		time.Sleep(time.Duration(rint(300)) * time.Microsecond)
	}
	for pos < int64(len(log)) { // the rest
		fetch(min(int64(len(log)), pos+10))
	}
	ps := c.d.parts[tp{"t", 0}]
	last := int64(len(log))
	for last > 0 && log[last-1] == "" {
		last--
	}
	deadline := time.Now().Add(10 * time.Second)
	var w int64
	for {
		if ps.trk != nil {
			wm, _ := ps.trk.Watermark()
			w = wm.Offset
		} else {
			w = last
		}
		var held int
		locked(c.d, func() { held = ps.held + len(ps.backlog) })
		if held == 0 && w >= last || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	stopMonitor()
	<-monDone
	require.Empty(t, monErr, "seed %d", seed)
	var held, handling, dheld, bl int
	locked(c.d, func() { held, handling, dheld, bl = ps.held, ps.handling, c.d.held, len(ps.backlog) })
	mu.Lock()
	var missing []string
	for _, v := range log {
		if v != "" && handled[v] == 0 {
			missing = append(missing, v)
		}
	}
	mu.Unlock()
	require.Empty(t, missing, "seed %d: records of the final log never handled", seed)
	require.GreaterOrEqual(t, w, last, "seed %d: watermark (held %d handling %d d.held %d backlog %d)", seed, held, handling, dheld, bl)
	require.Zero(t, held, "seed %d: ps.held", seed)
	require.Zero(t, dheld, "seed %d: d.held", seed)
	locked(c.d, func() {
		require.Empty(t, ps.keys, "seed %d: units of keys left", seed)
		require.Empty(t, ps.copies, "seed %d: units of copies left", seed)
	})
}

func epochOf(v string) int32 {
	var off, gen int32
	fmt.Sscanf(v, "%d/%d", &off, &gen)
	return gen
}
