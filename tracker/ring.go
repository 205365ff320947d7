package tracker

import (
	"math/bits"
	"strconv"
	"sync/atomic"
)

// A slot holds one delivery. Its word packs the delivery's sequence number, whether its offset is
// the previous delivery's + 1 in the same generation, and its state:
//
//	seq<<3 | contiguous<<2 | state
//
// Sequence numbers never repeat, so a compare-and-swap against a slot the ring has since reused for a
// later delivery fails. The deliverer writes offset and epoch before it publishes the word.
type slot struct {
	word   atomic.Uint64
	offset atomic.Int64
	epoch  atomic.Int32
}

// Slot states. A slot of a sequence number that was never delivered has an older sequence number in
// its word, whatever its state.
const (
	stateInFlight uint64 = 1 // delivered, not completed
	stateDone     uint64 = 2 // completed
	stateDead     uint64 = 3 // still in flight when a new generation began; completing it is Stale
	stateMask     uint64 = 3
	contiguousBit uint64 = 4
	seqShift             = 3
)

func pack(seq uint64, contiguous bool, state uint64) uint64 {
	w := seq<<seqShift | state
	if contiguous {
		w |= contiguousBit
	}
	return w
}

func seqOf(w uint64) uint64   { return w >> seqShift }
func stateOf(w uint64) uint64 { return w & stateMask }

// ringSize returns the number of slots for a capacity: the next power of two above it, so that at
// least one slot beyond the capacity stays unused. Readers rely on that spare room: the slot just
// behind the head is not reused until the head has moved past it (see Partition.read).
func ringSize(capacity int) int {
	if capacity < 1 {
		panic("tidemark: tracker: capacity must be at least 1, got " + strconv.Itoa(capacity))
	}
	if uint64(capacity) >= 1<<40 {
		panic("tidemark: tracker: capacity too large: " + strconv.Itoa(capacity))
	}
	return 1 << bits.Len(uint(capacity))
}

// cacheLinePad keeps fields written by different goroutines on different cache lines.
type cacheLinePad [64]byte
