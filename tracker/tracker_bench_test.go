package tracker

import (
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
)

// mutexPartition is the baseline of DESIGN §6: Partition's hot path (Deliver, Complete, Watermark)
// over a mutex and a slice of in-flight deliveries sorted by offset.
type mutexPartition struct {
	mu       sync.Mutex
	capacity int
	seq      uint64
	inFlight []mutexEntry // sorted: offsets increase within a generation
	highest  int64
	epoch    int32 // of the highest delivered
	any      bool
}

type mutexEntry struct {
	seq    uint64
	offset int64
	epoch  int32
}

func newMutexPartition(capacity int) *mutexPartition {
	return &mutexPartition{capacity: capacity, inFlight: make([]mutexEntry, 0, capacity)}
}

func (m *mutexPartition) Deliver(offset int64, epoch int32) (Delivery, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.any && offset <= m.highest {
		m.inFlight, m.any = m.inFlight[:0], false
	}
	if len(m.inFlight) >= m.capacity {
		return Delivery{}, ErrFull
	}
	m.seq++
	m.inFlight = append(m.inFlight, mutexEntry{m.seq, offset, epoch})
	m.highest, m.epoch, m.any = offset, epoch, true
	return Delivery{seq: m.seq, offset: offset}, nil
}

func (m *mutexPartition) Complete(d Delivery) Result {
	m.mu.Lock()
	defer m.mu.Unlock()
	i, found := slices.BinarySearchFunc(m.inFlight, d.offset, func(e mutexEntry, o int64) int {
		switch {
		case e.offset < o:
			return -1
		case e.offset > o:
			return 1
		}
		return 0
	})
	if !found || m.inFlight[i].seq != d.seq {
		return Stale
	}
	m.inFlight = slices.Delete(m.inFlight, i, i+1)
	return Completed
}

func (m *mutexPartition) Watermark() (Watermark, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	switch {
	case len(m.inFlight) > 0:
		return Watermark{m.inFlight[0].offset, m.inFlight[0].epoch}, true
	case m.any:
		return Watermark{m.highest + 1, m.epoch}, true
	}
	return Watermark{}, false
}

// hotPath is what both benchmarks drive: the Partition and the baseline.
type hotPath interface {
	Deliver(offset int64, epoch int32) (Delivery, error)
	Complete(d Delivery) Result
	Watermark() (Watermark, bool)
}

var implementations = []struct {
	name string
	new  func(capacity int) hotPath
}{
	{"tracker", func(c int) hotPath { return NewPartition(c) }},
	{"mutex-sorted-slice", func(c int) hotPath { return newMutexPartition(c) }},
}

// One goroutine delivers and completes, with 64 deliveries in flight completed out of order: each op
// is one Deliver and one Complete.
func BenchmarkDeliverComplete(b *testing.B) {
	const window = 64
	// Rounds alternate two visiting orders of the window, so each round completes the previous
	// round's deliveries out of delivery order.
	var orders [2][window]int
	for i := range window {
		orders[0][i] = i
		orders[1][i] = (i*37 + 11) % window
	}
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			p := impl.new(2 * window)
			var held [window]Delivery
			b.ReportAllocs()
			var offset int64
			for b.Loop() {
				j := orders[(offset/window)&1][offset%window]
				if held[j] != (Delivery{}) {
					p.Complete(held[j])
				}
				d, err := p.Deliver(offset, 0)
				if err != nil {
					b.Fatal(err)
				}
				held[j] = d
				offset++
			}
		})
	}
}

// GOMAXPROCS goroutines complete deliveries of one partition in parallel, each op one Complete and
// one Deliver. Delivery stays serial, as in the poll loop: a goroutine whose deliveries are all
// completed takes the deliverer's flag and delivers the next burst, while the others keep completing
// theirs, out of delivery order. Both implementations run the same harness.
func BenchmarkCompleteParallel(b *testing.B) {
	const burst = 64
	for _, impl := range implementations {
		b.Run(impl.name, func(b *testing.B) {
			p := impl.new(64 * burst)
			var (
				delivering atomic.Bool // the deliverer's flag
				next       int64       // the next offset to deliver; guarded by delivering
			)
			// refill delivers up to burst offsets into held as the only deliverer, and returns how many.
			refill := func(held *[burst]Delivery) int {
				for spins := 0; !delivering.CompareAndSwap(false, true); spins++ {
					if spins%64 == 63 {
						runtime.Gosched()
					}
				}
				n := 0
				for ; n < burst; n++ {
					d, err := p.Deliver(next, 0)
					if err != nil {
						break // ErrFull: another goroutine holds the oldest delivery
					}
					held[n] = d
					next++
				}
				delivering.Store(false)
				return n
			}
			b.ReportAllocs()
			b.ResetTimer()
			b.RunParallel(func(pb *testing.PB) {
				var held [burst]Delivery
				n, k := 0, 0
				complete := func() {
					j := k
					if n == burst {
						j = (k*37 + 11) % burst // out of delivery order
					}
					k++
					if p.Complete(held[j]) != Completed {
						b.Error("not completed")
					}
				}
				for pb.Next() {
					for k == n {
						if n, k = refill(&held), 0; n == 0 {
							runtime.Gosched()
						}
					}
					complete()
				}
				// Out of iterations, a goroutine completes what it holds: a goroutine that still has
				// some would otherwise spin for good on a ring filled behind the oldest of them
				// (a 2-core run hung here once its goroutines' shares of b.N came apart).
				for k < n {
					complete()
				}
			})
		})
	}
}
