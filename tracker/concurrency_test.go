package tracker

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// concurrentPartition is one partition of the concurrency test: the offsets its deliverer will
// deliver (with gaps), and per delivery a flag set just before its Complete is called.
type concurrentPartition struct {
	topic     string
	partition int32
	p         *Partition
	offsets   []int64
	started   []atomic.Bool
}

// epochOf gives each offset a leader epoch, so a watermark's epoch can be checked against its offset.
func epochOf(offset int64) int32 { return int32(offset / 1000) }

// watermarkChecker holds one reader's view of the watermarks it read, partition by partition.
type watermarkChecker struct {
	parts  []*concurrentPartition
	cursor []int   // per partition: deliveries below the last watermark read, all verified started
	last   []int64 // per partition: the last watermark read
	fail   func(format string, args ...any)
}

func newWatermarkChecker(parts []*concurrentPartition, fail func(string, ...any)) *watermarkChecker {
	c := &watermarkChecker{parts: parts, cursor: make([]int, len(parts)), last: make([]int64, len(parts)), fail: fail}
	for i := range c.last {
		c.last[i] = -1
	}
	return c
}

// check verifies a watermark read from partition i, and must be called after the read. It is sound:
// a watermark may pass a delivery only once its Complete has returned Completed, which is after its
// started flag was set; so a delivery below the watermark whose flag is still unset when checked had
// not even begun completing when the watermark was read. The watermark never decreases (one
// generation), and is a delivered offset or a delivered offset + 1, with that record's epoch.
func (c *watermarkChecker) check(i int, wm Watermark, strictlyUp bool) {
	cp := c.parts[i]
	if wm.Offset < c.last[i] || (strictlyUp && wm.Offset == c.last[i]) {
		c.fail("%s/%d: watermark went from %d to %d", cp.topic, cp.partition, c.last[i], wm.Offset)
		return
	}
	c.last[i] = wm.Offset
	k := c.cursor[i]
	for ; k < len(cp.offsets) && cp.offsets[k] < wm.Offset; k++ {
		if !cp.started[k].Load() {
			c.fail("%s/%d: watermark %d passed offset %d, whose completion had not started", cp.topic, cp.partition, wm.Offset, cp.offsets[k])
			return
		}
	}
	c.cursor[i] = k
	atDelivery := k < len(cp.offsets) && cp.offsets[k] == wm.Offset
	afterDelivery := k > 0 && cp.offsets[k-1]+1 == wm.Offset
	if !atDelivery && !afterDelivery {
		c.fail("%s/%d: watermark %d is neither a delivered offset nor one + 1", cp.topic, cp.partition, wm.Offset)
	}
	if wm.Epoch != epochOf(wm.Offset) && wm.Epoch != epochOf(wm.Offset-1) {
		c.fail("%s/%d: watermark %d carries epoch %d", cp.topic, cp.partition, wm.Offset, wm.Epoch)
	}
}

type handoff struct {
	part  int
	index int
	d     Delivery
}

// Under concurrent completion in random order, no watermark read (by Watermark or Moved) passes a
// delivery that had not been completed, and once everything completed the watermark is the highest
// offset + 1 (DESIGN §3.1; one poll loop per partition, many lanes completing).
func TestConcurrentCompletionsNeverPassAnUnfinishedDelivery(t *testing.T) {
	const (
		partitions = 16
		completers = 8
		capacity   = 64
		batch      = 8
	)
	perPartition := concurrentDeliveries / partitions
	tr := New(capacity)
	rng := rand.New(rand.NewPCG(7, 11))
	parts := make([]*concurrentPartition, partitions)
	for i := range parts {
		cp := &concurrentPartition{topic: fmt.Sprintf("topic-%d", i%2), partition: int32(i / 2)}
		cp.p = tr.Partition(cp.topic, cp.partition)
		cp.offsets = make([]int64, perPartition)
		cp.started = make([]atomic.Bool, perPartition)
		next := int64(rng.IntN(100))
		for k := range cp.offsets {
			cp.offsets[k] = next
			next += 1 + int64(rng.IntN(3)) // gaps: offsets never delivered
		}
		parts[i] = cp
	}

	var failures atomic.Int32
	fail := func(format string, args ...any) {
		if failures.Add(1) <= 5 {
			t.Errorf(format, args...)
		}
	}
	inboxes := make([]chan []handoff, completers)
	for i := range inboxes {
		inboxes[i] = make(chan []handoff, 64)
	}

	begin := time.Now()
	var deliverers, lanes sync.WaitGroup
	for i, cp := range parts {
		deliverers.Go(func() { // the poll loop of one partition
			rng := rand.New(rand.NewPCG(uint64(i), 1))
			pending := make([]handoff, 0, batch)
			flush := func() {
				if len(pending) > 0 {
					inboxes[rng.IntN(completers)] <- pending
					pending = make([]handoff, 0, batch)
				}
			}
			for k, o := range cp.offsets {
				d, err := cp.p.Deliver(o, epochOf(o))
				for err != nil { // ErrFull: hand over what is held, let the lanes complete
					flush()
					runtime.Gosched()
					d, err = cp.p.Deliver(o, epochOf(o))
				}
				pending = append(pending, handoff{i, k, d})
				if len(pending) == batch {
					flush()
				}
			}
			flush()
		})
	}
	for w := range completers {
		lanes.Go(func() { // a lane: completes what it holds in random order, reading as it goes
			rng := rand.New(rand.NewPCG(uint64(w), 2))
			check := newWatermarkChecker(parts, fail)
			var held []handoff
			inbox := inboxes[w]
			for open := true; open || len(held) > 0; {
				if len(held) == 0 && open {
					b, ok := <-inbox
					held, open = append(held, b...), ok
					continue
				}
				select {
				case b, ok := <-inbox:
					held, open = append(held, b...), open && ok
					if !ok {
						inbox = nil // closed: finish what is held
					}
					continue
				default:
				}
				j := rng.IntN(len(held))
				h := held[j]
				held[j] = held[len(held)-1]
				held = held[:len(held)-1]
				cp := parts[h.part]
				cp.started[h.index].Store(true)
				complete := cp.p.Complete
				if rng.IntN(2) == 0 { // a lane's take: the watermark moves at Advance, or at a reader
					complete = cp.p.CompleteDeferred
				}
				if r := complete(h.d); r != Completed {
					fail("%s/%d: complete %d: %v", cp.topic, cp.partition, h.d.Offset(), r)
				}
				if rng.IntN(4) == 0 {
					cp.p.Advance()
				}
				wm, ok := cp.p.Watermark()
				if !ok {
					fail("%s/%d: no watermark after a completion", cp.topic, cp.partition)
					continue
				}
				check.check(h.part, wm, false)
			}
		})
	}

	// The committer: reports moves while the others run; every report is a new, higher watermark.
	stop := make(chan struct{})
	committerDone := make(chan int)
	committer := newWatermarkChecker(parts, fail)
	index := make(map[topicPartition]int, partitions)
	for i, cp := range parts {
		index[topicPartition{cp.topic, cp.partition}] = i
	}
	report := func() (n int) {
		for topic, byPartition := range tr.Moved() {
			for partition, wm := range byPartition {
				committer.check(index[topicPartition{topic, partition}], wm, true)
				n++
			}
		}
		return n
	}
	go func() {
		reports := 0
		for {
			select {
			case <-stop:
				committerDone <- reports
				return
			default:
			}
			reports += report()
			runtime.Gosched()
		}
	}()

	deliverers.Wait()
	for _, in := range inboxes {
		close(in)
	}
	lanes.Wait()
	close(stop)
	reports := <-committerDone
	reports += report()
	t.Logf("%d deliveries on %d partitions, %d lanes: %v; %d moves reported", perPartition*partitions, partitions, completers, time.Since(begin), reports)

	for i, cp := range parts {
		highest := cp.offsets[len(cp.offsets)-1]
		wm, ok := cp.p.Watermark()
		require.True(t, ok)
		require.Equal(t, Watermark{highest + 1, epochOf(highest)}, wm, "%s/%d", cp.topic, cp.partition)
		require.Equal(t, highest+1, committer.last[i], "%s/%d: the last move reported", cp.topic, cp.partition)
		require.Equal(t, 0, cp.p.InFlight())
		_, ok = cp.p.Oldest()
		require.False(t, ok)
	}
	require.Nil(t, tr.Moved())
}

// Resets and rewinds (some above deliveries still in flight) while lanes complete and readers read:
// every completion is Completed or Stale,
// a reader never sees a generation's watermark go down, and the last generation ends at its highest
// delivered offset + 1 with nothing in flight (DESIGN §3.1: a new generation ignores older tokens).
func TestGenerationsUnderConcurrentCompletion(t *testing.T) {
	const (
		generations = 200
		perGen      = 200
		lanes       = 4
	)
	p := NewPartition(32)
	tokens := make(chan Delivery, 64)
	var completed, stale, other atomic.Int64
	var wg sync.WaitGroup
	for w := range lanes {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(w), 3))
			var held []Delivery
			for open := true; open || len(held) > 0; {
				if len(held) == 0 { // wait only with empty hands: the deliverer may be waiting for us
					d, ok := <-tokens
					if open = ok; ok {
						held = append(held, d)
					}
					continue
				}
				if open && len(held) < 5 {
					select {
					case d, ok := <-tokens:
						if open = ok; ok {
							held = append(held, d)
						}
						continue
					default:
					}
				}
				j := rng.IntN(len(held))
				switch p.Complete(held[j]) {
				case Completed:
					completed.Add(1)
				case Stale:
					stale.Add(1)
				default:
					other.Add(1)
				}
				held[j] = held[len(held)-1]
				held = held[:len(held)-1]
			}
		})
	}
	stop := make(chan struct{})
	var readers sync.WaitGroup
	var regressions atomic.Int64
	for range 2 {
		readers.Go(func() {
			last := map[uint64]int64{}
			for {
				select {
				case <-stop:
					return
				default:
				}
				runtime.Gosched() // two CPUs may be all there is: let the lanes and the deliverer run
				g1 := p.Generation()
				wm, ok := p.Watermark()
				if g1 != p.Generation() || !ok {
					continue
				}
				if prev, seen := last[g1]; seen && wm.Offset < prev {
					regressions.Add(1)
				}
				last[g1] = wm.Offset
				p.InFlight()
				p.Oldest()
			}
		})
	}

	rng := rand.New(rand.NewPCG(5, 8))
	var highest int64
	for g := range generations {
		base := int64(rng.IntN(1000))
		switch g % 3 {
		case 0:
			p.Reset()
		case 1: // a rewind just below the highest, likely above deliveries the lanes hold: they stay
			base = max(highest-int64(rng.IntN(8)), 0)
		} // else the first Deliver below is a rewind, unless base is above everything delivered
		offset := base
		for range perGen {
			d, err := p.Deliver(offset, 0)
			for err != nil { // ErrFull: the lanes hold the oldest
				runtime.Gosched()
				d, err = p.Deliver(offset, 0)
			}
			tokens <- d
			highest = offset
			offset += 1 + int64(rng.IntN(2))
		}
	}
	close(tokens)
	wg.Wait()
	close(stop)
	readers.Wait()

	require.Zero(t, other.Load(), "no duplicate completions were made")
	require.Equal(t, int64(generations*perGen), completed.Load()+stale.Load())
	require.Zero(t, regressions.Load(), "a watermark went down within a generation")
	wm, ok := p.Watermark()
	require.True(t, ok)
	require.Equal(t, highest+1, wm.Offset)
	require.Zero(t, p.InFlight())
	require.GreaterOrEqual(t, p.Generation(), uint64(generations*2/3))
	t.Logf("generation %d: %d completed, %d stale", p.Generation(), completed.Load(), stale.Load())
}
