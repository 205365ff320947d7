package tracker

import "runtime"

// A Watermark is the position a consumer group may commit for a partition (DESIGN §3.1).
type Watermark struct {
	// Offset is the next offset to consume: what Kafka commits. It is the lowest delivered offset
	// still in flight, or the highest delivered offset + 1 when none is.
	Offset int64
	// Epoch is the leader epoch of the record the watermark came from, as given to Deliver: the
	// delivery at Offset while it is in flight, else the highest delivered record. Kafka's
	// MarkCommitOffsets takes it as the commit's LeaderEpoch.
	Epoch int32
}

// A view is one consistent reading of a partition.
type view struct {
	wm       Watermark
	ok       bool // the generation has a delivery
	inFlight bool // wm.Offset is an in-flight delivery's (else the highest delivered + 1)
	// key orders watermarks over the partition's life and names each distinct one of a generation:
	// 2*seq for an in-flight delivery seq, 2*seq+1 for "delivery seq + 1". A delivery whose offset is
	// its predecessor's + 1 takes the predecessor's "+1" key, as its watermark is the same offset.
	// Sequence numbers grow across generations, so a new generation's keys are higher than any before.
	key uint64
}

// read returns a consistent view of the partition without blocking its writers. It retries when a
// new generation is being set up, or when the head moved so far that a slot it read may have been
// reused; a completed slot at the head is first helped past.
func (p *Partition) read() view {
	for {
		ver := p.version.Load()
		if ver&1 != 0 {
			runtime.Gosched() // the deliverer is in Reset or a rewind: a short pass over the ring
			continue
		}
		start := p.start.Load()
		h := p.head.Load()
		s := &p.ring[h&p.mask]
		w := s.word.Load()
		var v view
		var slack uint64 // how far the head may have moved for the slot read to be unchanged
		switch seq := seqOf(w); {
		case seq == h && stateOf(w) == stateInFlight:
			v = view{wm: Watermark{s.offset.Load(), s.epoch.Load()}, ok: true, inFlight: true, key: 2 * h}
			if w&contiguousBit != 0 {
				v.key = 2*h - 1
			}
			slack = p.slack // slot h is reused for h+len(ring) only once the head passes h+slack
		case seq == h && (stateOf(w) == stateDone || stateOf(w) == stateDead):
			p.advance()
			continue
		case seq > h: // reused (the head moved on): look again
			continue
		case h == start: // nothing delivered at the head, and nothing before it in this generation
		default: // nothing in flight: the highest delivered (h-1, completed) + 1
			prev := &p.ring[(h-1)&p.mask]
			v = view{wm: Watermark{prev.offset.Load() + 1, prev.epoch.Load()}, ok: true, key: 2*h - 1}
			slack = p.slack - 1
		}
		if p.head.Load()-h <= slack && p.version.Load() == ver {
			return v
		}
	}
}

// Watermark returns the partition's committable position and true, or false before the first
// delivery of the generation. Safe from any goroutine; it takes no lock and does not allocate.
func (p *Partition) Watermark() (Watermark, bool) {
	v := p.read()
	return v.wm, v.ok
}

// Moved returns the watermark and true if it differs from every watermark Moved has returned in this
// generation, so the runtime calls MarkCommitOffsets once per partition per move (DESIGN §3.11); else
// the zero Watermark and false. A watermark is reported at most once, however many goroutines call
// Moved. After a Reset or a rewind the new generation's first watermark is reported even if it is
// lower than, or equal to, the last one reported; a rewind that keeps a delivery in flight leaves
// the watermark at that delivery, which is not reported again. Intermediate values between two
// calls are skipped.
func (p *Partition) Moved() (Watermark, bool) {
	for {
		v := p.read()
		if !v.ok {
			return Watermark{}, false
		}
		last := p.reported.Load()
		if v.key <= last {
			return Watermark{}, false
		}
		if p.reported.CompareAndSwap(last, v.key) {
			return v.wm, true
		}
	}
}

// Oldest returns the lowest offset in flight (deliveries a rewind kept in flight included) and true, or false when nothing is in
// flight. A partition whose Oldest stays put while others move is stalled (DESIGN §3.3). Safe from any
// goroutine.
func (p *Partition) Oldest() (offset int64, ok bool) {
	v := p.read()
	return v.wm.Offset, v.inFlight
}

// InFlight returns the number of deliveries not yet completed: this generation's, and those a
// rewind kept in flight. It counts the ring from the oldest in-flight delivery, so it costs up to
// one pass over the ring; while deliveries and completions run concurrently the count is a recent
// one rather than exact. Safe from any goroutine.
func (p *Partition) InFlight() int {
	for {
		ver := p.version.Load()
		if ver&1 != 0 {
			runtime.Gosched()
			continue
		}
		h := p.head.Load()
		n := 0
		for seq := h; seq-h < uint64(len(p.ring)); seq++ {
			w := p.ring[seq&p.mask].word.Load()
			if seqOf(w) != seq {
				break
			}
			if stateOf(w) == stateInFlight {
				n++
			}
		}
		if p.version.Load() == ver {
			return n
		}
	}
}
