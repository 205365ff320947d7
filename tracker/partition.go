package tracker

import (
	"math"
	"sync/atomic"
)

// A Partition tracks the deliveries of one topic partition and computes its [Watermark]
// (DESIGN §3.1). Create it with [NewPartition] or [Tracker.Partition].
//
// Deliver and Reset belong to one goroutine, the poll loop that fetches the partition; every other
// method may be called from any goroutine, concurrently with them and with each other. Deliver and
// Complete take no lock.
type Partition struct {
	// Set by NewPartition, then only read.
	ring     []slot
	mask     uint64 // len(ring) - 1
	capacity uint64
	slack    uint64 // len(ring) - capacity >= 1: how far the head may move before a slot at it is reused

	_ cacheLinePad

	// Owned by the deliverer goroutine.
	tail     uint64 // sequence number of the next delivery
	headSeen uint64 // the head when the deliverer last looked: at or below the head
	highest  int64  // highest delivered offset of this generation, if any
	any      bool   // whether this generation has a delivery

	_ cacheLinePad

	// head is the sequence number of the oldest delivery of this generation not yet completed, or
	// tail when there is none. Completers advance it by compare-and-swap; Reset moves it to tail. It
	// never decreases.
	head atomic.Uint64

	_ cacheLinePad

	// version is 2*(generation-1), and odd while a new generation is being set up (a sequence lock
	// with one writer, the deliverer; readers retry around it).
	version atomic.Uint64
	// start is the sequence number of the first delivery of this generation.
	start atomic.Uint64
	// reported is the key (see Partition.read) of the last watermark Moved returned; 0 for none.
	reported atomic.Uint64
	// beforeMove, a test hook, runs in advance between its scan and its compare-and-swap of the
	// head; nil outside tests.
	beforeMove func()
}

// NewPartition returns an empty Partition in generation 1 whose ring holds capacity deliveries (the
// runtime passes MaxInFlightPerPartition + MaxPollRecords + 1). It panics if capacity < 1. Memory is
// about 24 bytes per slot, capacity rounded up to the next power of two above it.
func NewPartition(capacity int) *Partition {
	n := ringSize(capacity)
	p := &Partition{
		ring:     make([]slot, n),
		mask:     uint64(n - 1),
		capacity: uint64(capacity),
		slack:    uint64(n - capacity),
		tail:     1, // sequence 0 is the zero Delivery's
		headSeen: 1,
	}
	p.head.Store(1)
	p.start.Store(1)
	return p
}

// Deliver records that the record at offset, with leader epoch epoch (as fetched, -1 if unknown), was
// received and is now in flight, and returns its token for [Partition.Complete]. An offset at or below
// the highest delivered offset of the generation is a rewind: it starts a new generation first, in
// which the deliveries at or above offset no longer count (they are delivered again) while those
// below it stay in flight (see rewind). Deliver returns [ErrFull] and records nothing when the
// ring holds its capacity of deliveries (the oldest in flight and all after it), and [ErrOffset]
// for a negative offset or math.MaxInt64. Only the partition's deliverer may call it: one
// goroutine at a time, serialised by the caller.
func (p *Partition) Deliver(offset int64, epoch int32) (Delivery, error) {
	if offset < 0 || offset == math.MaxInt64 {
		return Delivery{}, ErrOffset
	}
	if p.any && offset <= p.highest && !p.rewind(offset) {
		return Delivery{}, ErrFull
	}
	seq := p.tail
	if seq-p.headSeen >= p.capacity { // the head only moves up: look at it only when it may be full
		if p.headSeen = p.head.Load(); seq-p.headSeen >= p.capacity {
			p.advance() // past deliveries CompleteDeferred completed, if any
			if p.headSeen = p.head.Load(); seq-p.headSeen >= p.capacity {
				return Delivery{}, ErrFull
			}
		}
	}
	s := &p.ring[seq&p.mask]
	s.offset.Store(offset)
	if s.epoch.Load() != epoch { // epochs rarely change: skip the store when the slot has it already
		s.epoch.Store(epoch)
	}
	s.word.Store(pack(seq, p.any && offset == p.highest+1, stateInFlight))
	p.tail = seq + 1
	p.highest, p.any = offset, true
	return Delivery{seq: seq, offset: offset}, nil
}

// Complete settles a delivery of this Partition (DESIGN §3.1), from any goroutine, and says what it did:
// [Completed] if the delivery was in flight (the watermark moves if it was the oldest), [Duplicate] if
// it was already completed in this generation, [Stale] if it was taken before the current generation
// began (a Reset or a rewind; a delivery a rewind kept in flight reports Completed once, then
// Stale), or is the zero Delivery. Only Completed changes anything. A completion
// that races with Reset reports Completed or Stale; either way the new generation is unaffected.
// A token of another Partition (one removed and created again, say) never reports Completed when
// its sequence number or its offset differs from this Partition's delivery: Stale while that
// delivery is in flight, Stale or Duplicate once its slot moved on. One that matches both cannot
// be told apart, so hand each token back to the Partition that issued it.
func (p *Partition) Complete(d Delivery) Result { return p.complete(d, true) }

// CompleteDeferred is Complete without moving the watermark: the delivery is settled at once, with
// Complete's Result, but the watermark moves past it only at the next [Partition.Advance], or when
// a reader ([Partition.Watermark], [Partition.Moved], [Partition.Oldest]), a Complete of the
// oldest delivery in flight or a Deliver that would find the ring full gets there first. It is for
// a goroutine that completes many deliveries in a row, a lane handling a take of records in
// offset order: one Advance after them moves the watermark once, where Complete moves it once per
// delivery (a compare-and-swap on a cache line every completer and the deliverer read). Until
// then [Partition.Span] counts the deliveries it left behind the watermark.
func (p *Partition) CompleteDeferred(d Delivery) Result { return p.complete(d, false) }

// Advance moves the watermark past the completed deliveries at its head, the ones CompleteDeferred
// left there, and reports whether it moved. Safe from any goroutine.
func (p *Partition) Advance() bool {
	h := p.head.Load()
	p.advance()
	return p.head.Load() != h
}

func (p *Partition) complete(d Delivery, advance bool) Result {
	if d.seq == 0 {
		return Stale
	}
	return p.completeFrom(d, p.ring[d.seq&p.mask].word.Load(), advance)
}

// completeFrom is complete once the word of d's slot was read, w: by then another goroutine may
// have completed d, the head moved past it and the slot taken a new delivery (tests call it with a
// w read before that).
func (p *Partition) completeFrom(d Delivery, w uint64, advance bool) Result {
	s := &p.ring[d.seq&p.mask]
	if seqOf(w) == d.seq && stateOf(w) == stateInFlight {
		if s.offset.Load() != d.offset && s.word.Load() == w {
			// A token of another Partition: while in flight, a slot keeps its offset. (Once its word
			// changed, the slot may hold a later delivery's offset: the compare-and-swap fails and
			// the word says what happened, a second completion among others: helper-78.)
			return Stale
		}
		if s.word.CompareAndSwap(w, w&^stateMask|stateDone) {
			if advance && p.head.Load() == d.seq { // else the head is behind: whoever moves it up to here looks again
				p.advance()
			}
			return Completed
		}
		w = s.word.Load() // completed by another goroutine, or killed by a new generation
	}
	switch seq := seqOf(w); {
	case seq < d.seq: // never delivered here: a token of another Partition
		return Stale
	case seq == d.seq && stateOf(w) == stateDead:
		return Stale
	case d.seq < p.start.Load(): // completed, then a new generation began; or its slot reused since
		return Stale
	default: // completed in this generation (its slot may have been reused since)
		return Duplicate
	}
}

// advance moves the head past completed slots, and past dead ones a rewind left behind kept ones.
// It is called by the completer of the slot at the head (Complete, not CompleteDeferred), by
// Advance, by a Deliver that finds the ring full, by rewind, and by readers that find a
// completed or dead slot there. Whoever moves the head looks again from the new
// head, so a slot completed while the head was below it is never left behind: its completer saw a
// head below its slot before the head reached it, hence after it completed the slot, and the
// goroutine that moved the head there reads it afterwards. A goroutine whose compare-and-swap fails
// leaves the rest to the one that succeeded.
func (p *Partition) advance() {
	for {
		h := p.head.Load()
		n := h
		for {
			w := p.ring[n&p.mask].word.Load()
			if seqOf(w) != n || stateOf(w) != stateDone && stateOf(w) != stateDead {
				break
			}
			n++
		}
		if n == h {
			return
		}
		if p.beforeMove != nil {
			p.beforeMove()
		}
		if !p.head.CompareAndSwap(h, n) {
			return
		}
	}
}

// Reset starts a new generation (a revoke or a seek, DESIGN §3.1): the partition forgets its
// deliveries, has no watermark until the next Deliver, and completing any delivery taken before the
// Reset returns [Stale] and changes nothing. Only the partition's deliverer goroutine may call it. It
// costs one pass over the deliveries still in the ring.
func (p *Partition) Reset() { p.newGeneration() }

// rewind starts a new generation for a delivery at offset, at or below the highest delivered one
// (DESIGN §3.1: a client-side rewind). The deliveries in flight at or above offset die (Stale):
// offset and what follows are delivered again. The ones below offset stay in flight, and hold the
// watermark, until completed: nothing delivers them again. A log truncation rewinds franz-go to
// the new leader's end offset, which may be above records still running (helper-87: a Tracked
// partition committed 6 while 3 ran, and 4 and 5 were queued). When none stays in flight, rewind is
// Reset. Otherwise it changes nothing and returns false if the ring has no room for the delivery
// at offset (Deliver's ErrFull), so that the generation never ends in dead deliveries.
// In-flight offsets increase with sequence numbers (each rewind kills those at or above its
// offset, the next ones start there), so the ones that stay are the oldest, from the head on.
func (p *Partition) rewind(offset int64) bool {
	keep := false
	for seq := p.head.Load(); seq < p.tail; seq++ {
		s := &p.ring[seq&p.mask]
		if w := s.word.Load(); seqOf(w) == seq && stateOf(w) == stateInFlight {
			keep = s.offset.Load() < offset
			break
		}
	}
	if !keep {
		p.newGeneration()
		return true
	}
	if p.tail-p.head.Load() >= p.capacity {
		if p.advance(); p.tail-p.head.Load() >= p.capacity {
			return false
		}
	}
	p.version.Add(1) // odd: readers wait for the new generation
	t := p.tail
	p.start.Store(t)
	for seq := p.head.Load(); seq < t; seq++ {
		s := &p.ring[seq&p.mask]
		if w := s.word.Load(); seqOf(w) == seq && stateOf(w) == stateInFlight && s.offset.Load() >= offset {
			s.word.CompareAndSwap(w, w&^stateMask|stateDead) // fails only if Complete won the slot
		}
	}
	// A completer of a kept delivery may have moved the head up to a slot the scan then killed,
	// and stopped there: nobody else looks again (helper-89).
	p.advance()
	p.any = false
	p.version.Add(1)
	return true
}

func (p *Partition) newGeneration() {
	p.version.Add(1) // odd: readers wait for the new generation
	t := p.tail
	h := p.head.Swap(t) // a completer's compare-and-swap from an older head now fails
	p.headSeen = t
	p.start.Store(t)
	for seq := h; seq < t; seq++ { // every slot still in flight is at or after the old head
		s := &p.ring[seq&p.mask]
		if w := s.word.Load(); seqOf(w) == seq && stateOf(w) == stateInFlight {
			s.word.CompareAndSwap(w, w&^stateMask|stateDead) // fails only if Complete won the slot
		}
	}
	p.any = false
	p.version.Add(1)
}

// Span returns how many ring slots the partition uses: the deliveries from the oldest one still in
// flight to the newest, completed ones behind the oldest included (and, until the next Advance or
// reader, completed ones CompleteDeferred left before it). Deliver returns ErrFull once it
// reaches the capacity, so a caller that pauses the partition at a bound below the capacity minus
// one poll never sees ErrFull (a record stuck in flight while later ones complete still fills the
// ring). Like Deliver it belongs to the deliverer: call it from that goroutine, or serialised with
// Deliver by the caller's lock.
func (p *Partition) Span() int { return int(p.tail - p.head.Load()) }

// Generation returns the partition's generation: 1 for a new Partition, plus one for every Reset and
// every rewind. Safe from any goroutine.
func (p *Partition) Generation() uint64 { return p.version.Load()>>1 + 1 }
