package tracker

import (
	"errors"
	"fmt"
	"slices"
	"testing"
)

// refPartition is the reference model of DESIGN §3.1: the deliveries in order, each in flight,
// done or dead, written as plainly as possible. A rewind that leaves deliveries below its offset in
// flight keeps them, and the ones before and between them, at the front; the current generation's
// start at genStart.
type refPartition struct {
	capacity   int
	generation uint64
	deliveries []refDelivery // in delivery order: in-flight offsets increase
	genStart   int           // index of this generation's first delivery
	reported   *int64        // offset Moved last reported
}

type refDelivery struct {
	offset int64
	epoch  int32
	done   bool
	dead   bool // in flight at or above a rewind's offset: delivered again, never completed
	token  Delivery
}

func (d refDelivery) inFlight() bool { return !d.done && !d.dead }

func (m *refPartition) highest() (int64, bool) {
	if len(m.deliveries) == m.genStart {
		return 0, false
	}
	return m.deliveries[len(m.deliveries)-1].offset, true
}

// oldest returns the index of the first delivery in flight, or -1.
func (m *refPartition) oldest() int {
	return slices.IndexFunc(m.deliveries, refDelivery.inFlight)
}

func (m *refPartition) watermark() (Watermark, bool) {
	if i := m.oldest(); i >= 0 {
		return Watermark{m.deliveries[i].offset, m.deliveries[i].epoch}, true
	}
	if len(m.deliveries) == m.genStart {
		return Watermark{}, false
	}
	last := m.deliveries[len(m.deliveries)-1]
	return Watermark{last.offset + 1, last.epoch}, true
}

func (m *refPartition) inFlight() (n int) {
	for _, d := range m.deliveries {
		if d.inFlight() {
			n++
		}
	}
	return n
}

// full says whether the ring holds capacity deliveries: the oldest in flight and all after it.
func (m *refPartition) full() bool {
	i := m.oldest()
	return i >= 0 && len(m.deliveries)-i >= m.capacity
}

func (m *refPartition) newGeneration() {
	m.generation++
	m.deliveries, m.genStart = nil, 0
	m.reported = nil
}

// rewind starts the generation of a delivery at offset that leaves the deliveries below offset in
// flight: those at or above it die. It returns the tokens that became stale: the dead ones, and
// the completed ones, which now belong to an earlier generation.
func (m *refPartition) rewind(offset int64) (stale []Delivery) {
	m.generation++
	for i := range m.deliveries {
		d := &m.deliveries[i]
		switch {
		case d.inFlight() && d.offset >= offset:
			d.dead = true
			stale = append(stale, d.token)
		case d.done && i >= m.genStart:
			stale = append(stale, d.token)
		}
	}
	m.genStart = len(m.deliveries)
	return stale
}

// fuzzRun drives a Partition and the model with ops decoded from data and compares them after each.
type fuzzRun struct {
	p     *Partition
	m     refPartition
	stale []Delivery // tokens of earlier generations
	data  []byte
	log   []string
}

func (r *fuzzRun) next() byte {
	if len(r.data) == 0 {
		return 0
	}
	b := r.data[0]
	r.data = r.data[1:]
	return b
}

func (r *fuzzRun) fail(format string, args ...any) error {
	return fmt.Errorf("%s\nops:\n  %s", fmt.Sprintf(format, args...), joinLines(r.log))
}

func joinLines(lines []string) string {
	out := ""
	for i, l := range lines {
		if i > 0 {
			out += "\n  "
		}
		out += l
	}
	return out
}

// deliver delivers offset on both sides and checks the outcome.
func (r *fuzzRun) deliver(offset int64, epoch int32) error {
	if offset < 0 { // a rewind below 0: refused before anything changes
		if _, err := r.p.Deliver(offset, epoch); !errors.Is(err, ErrOffset) {
			return r.fail("deliver %d: want ErrOffset, got %v", offset, err)
		}
		return nil
	}
	if h, any := r.m.highest(); any && offset <= h {
		switch i := r.m.oldest(); {
		case i < 0 || r.m.deliveries[i].offset >= offset: // nothing stays in flight: a Reset
			for _, d := range r.m.deliveries {
				r.stale = append(r.stale, d.token)
			}
			r.m.newGeneration()
		case r.m.full(): // refused before anything changes
			if _, err := r.p.Deliver(offset, epoch); !errors.Is(err, ErrFull) {
				return r.fail("rewind to %d: want ErrFull, got %v", offset, err)
			}
			return nil
		default:
			r.stale = append(r.stale, r.m.rewind(offset)...)
		}
	}
	d, err := r.p.Deliver(offset, epoch)
	if r.m.full() {
		if !errors.Is(err, ErrFull) {
			return r.fail("deliver %d: want ErrFull, got %v", offset, err)
		}
		return nil
	}
	if err != nil {
		return r.fail("deliver %d: %v", offset, err)
	}
	if d.Offset() != offset {
		return r.fail("deliver %d: token says %d", offset, d.Offset())
	}
	r.m.deliveries = append(r.m.deliveries, refDelivery{offset: offset, epoch: epoch, token: d})
	return nil
}

func (r *fuzzRun) complete(d Delivery, want Result) error {
	return r.completeWith(r.p.Complete, d, want)
}

func (r *fuzzRun) completeWith(complete func(Delivery) Result, d Delivery, want Result) error {
	if got := complete(d); got != want {
		return r.fail("complete %d: want %v, got %v", d.Offset(), want, got)
	}
	return nil
}

// step decodes and applies one op.
func (r *fuzzRun) step() error {
	op, arg := r.next()%9, r.next()
	h, any := r.m.highest()
	switch op {
	case 0, 1: // deliver after a gap of 0..3
		offset := int64(arg % 32) // the generation's first delivery: anywhere (a seek)
		if any {
			offset = h + 1 + int64(arg%4)
		}
		r.log = append(r.log, fmt.Sprintf("deliver %d", offset))
		return r.deliver(offset, int32(arg%3))
	case 2, 3: // complete an in-flight delivery (3: CompleteDeferred, moved past by the next reader)
		var open []int
		for i, d := range r.m.deliveries {
			if d.inFlight() {
				open = append(open, i)
			}
		}
		if len(open) == 0 {
			r.log = append(r.log, "complete zero")
			return r.complete(Delivery{}, Stale)
		}
		i := open[int(arg)%len(open)]
		r.m.deliveries[i].done = true
		if i < r.m.genStart { // kept in flight by a rewind: completed, it is of an earlier generation
			r.stale = append(r.stale, r.m.deliveries[i].token)
		}
		if op == 3 {
			r.log = append(r.log, fmt.Sprintf("complete %d deferred", r.m.deliveries[i].offset))
			return r.completeWith(r.p.CompleteDeferred, r.m.deliveries[i].token, Completed)
		}
		r.log = append(r.log, fmt.Sprintf("complete %d", r.m.deliveries[i].offset))
		return r.complete(r.m.deliveries[i].token, Completed)
	case 4: // complete a completed delivery again
		var done []int
		for i, d := range r.m.deliveries[r.m.genStart:] {
			if d.done {
				done = append(done, r.m.genStart+i)
			}
		}
		if len(done) == 0 {
			r.log = append(r.log, "complete zero")
			return r.complete(Delivery{}, Stale)
		}
		d := r.m.deliveries[done[int(arg)%len(done)]]
		r.log = append(r.log, fmt.Sprintf("complete %d again", d.offset))
		return r.complete(d.token, Duplicate)
	case 5: // complete a delivery of an earlier generation
		if len(r.stale) == 0 {
			r.log = append(r.log, "complete zero")
			return r.complete(Delivery{}, Stale)
		}
		d := r.stale[int(arg)%len(r.stale)]
		r.log = append(r.log, fmt.Sprintf("complete stale %d", d.Offset()))
		return r.complete(d, Stale)
	case 6: // reset, or rewind
		if arg%2 == 0 || !any {
			r.log = append(r.log, "reset")
			for _, d := range r.m.deliveries {
				r.stale = append(r.stale, d.token)
			}
			r.m.newGeneration()
			r.p.Reset()
			return nil
		}
		back := int64(arg/2) % (h + 2) // 0 redelivers the highest; may go below 0
		r.log = append(r.log, fmt.Sprintf("rewind to %d", h-back))
		return r.deliver(h-back, int32(arg%3))
	case 7: // fill the ring with contiguous deliveries until it refuses
		r.log = append(r.log, "fill")
		for i := 0; i <= r.m.capacity; i++ {
			offset := int64(arg % 32)
			if h, any := r.m.highest(); any {
				offset = h + 1
			}
			if r.m.full() {
				return r.deliver(offset, 1) // must be refused, and change nothing
			}
			if err := r.deliver(offset, 1); err != nil {
				return err
			}
		}
		return r.fail("fill: the ring never filled")
	default: // report a move
		r.log = append(r.log, "moved")
		want, ok := r.m.watermark()
		moved := ok && (r.m.reported == nil || *r.m.reported != want.Offset)
		got, gotMoved := r.p.Moved()
		if gotMoved != moved || (moved && got != want) {
			return r.fail("moved: want %v %v, got %v %v", want, moved, got, gotMoved)
		}
		if moved {
			r.m.reported = &want.Offset
		}
		return nil
	}
}

// check compares every reading of the Partition with the model. Span comes first: the reads after
// it move the head past deferred completions (CompleteDeferred, op 3), which Span still counts, so
// it may be above the model's span, never below (the head never passes a delivery in flight).
func (r *fuzzRun) check() error {
	if i := r.m.oldest(); i >= 0 && r.p.Span() < len(r.m.deliveries)-i {
		return r.fail("span %d below the %d deliveries from the oldest in flight", r.p.Span(), len(r.m.deliveries)-i)
	}
	want, wantOK := r.m.watermark()
	got, ok := r.p.Watermark()
	if ok != wantOK || got != want {
		return r.fail("watermark: want %v %v, got %v %v", want, wantOK, got, ok)
	}
	if n, want := r.p.InFlight(), r.m.inFlight(); n != want {
		return r.fail("in flight: want %d, got %d", want, n)
	}
	o, ok := r.p.Oldest()
	if i := r.m.oldest(); (i >= 0) != ok || (ok && o != r.m.deliveries[i].offset) {
		return r.fail("oldest: got %d %v, model index %d", o, ok, i)
	}
	if g := r.p.Generation(); g != r.m.generation {
		return r.fail("generation: want %d, got %d", r.m.generation, g)
	}
	return nil
}

// runOps decodes data into ops (the first byte sets the capacity, 1..8) and returns the first
// difference between the Partition and the model.
func runOps(data []byte) error {
	r := &fuzzRun{data: data}
	capacity := int(r.next()%8) + 1
	r.p = NewPartition(capacity)
	r.m = refPartition{capacity: capacity, generation: 1}
	for steps := 0; len(r.data) > 0 && steps < 2000; steps++ {
		if err := r.step(); err != nil {
			return err
		}
		if err := r.check(); err != nil {
			return err
		}
		if len(r.stale) > 64 {
			r.stale = r.stale[len(r.stale)-64:]
		}
		if len(r.log) > 64 {
			r.log = r.log[len(r.log)-64:]
		}
	}
	return nil
}

// The tracker agrees with a plain reference model after every op of any sequence (DESIGN §5).
func FuzzTracker(f *testing.F) {
	f.Add([]byte{3, 0, 0, 0, 1, 0, 2, 2, 0, 8, 0, 2, 1, 8, 0})                         // deliver, gap, complete, report
	f.Add([]byte{0, 7, 0, 0, 0, 2, 0, 4, 0, 7, 0, 2, 5, 8, 0})                         // capacity 1: fill, refuse
	f.Add([]byte{7, 0, 5, 0, 0, 0, 0, 6, 1, 5, 0, 2, 0, 8, 0, 6, 0, 5, 1})             // rewind, stale, reset
	f.Add([]byte{4, 7, 9, 2, 3, 2, 1, 4, 0, 8, 0, 7, 2, 2, 7, 8, 1})                   // fill twice around a completion
	f.Add([]byte{7, 0, 0, 0, 0, 0, 0, 0, 0, 2, 0, 6, 3, 8, 0, 2, 0, 8, 0, 5, 0, 4, 0}) // rewind above 1 in flight: kept
	f.Fuzz(func(t *testing.T, data []byte) {
		if err := runOps(data); err != nil {
			t.Fatal(err)
		}
	})
}
