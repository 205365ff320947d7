package tracker

import (
	"errors"
	"strconv"
)

// ErrFull is returned by [Partition.Deliver] when the partition's ring holds its capacity of
// deliveries: the oldest one still in flight and every delivery after it (DESIGN §3.1, §3.6). Nothing is
// recorded; the caller pauses the partition and delivers the record again once completions free the
// ring.
var ErrFull = errors.New("tidemark: tracker: partition ring full")

// ErrOffset is returned by [Partition.Deliver] for an offset no Kafka record can have: negative, or
// math.MaxInt64 (its watermark, offset + 1, would overflow). Nothing is recorded.
var ErrOffset = errors.New("tidemark: tracker: invalid offset")

// A Delivery is the token of one delivered offset, returned by [Partition.Deliver] and handed back
// to [Partition.Complete] of the same Partition when the record is settled (a Partition cannot
// always tell another's tokens from its own: see Complete). It is a small comparable
// value, safe to copy and to pass between goroutines. The zero Delivery is invalid: completing it
// returns [Stale].
type Delivery struct {
	seq    uint64 // the partition's delivery sequence number, from 1; never reused
	offset int64
}

// Offset returns the record offset that was delivered (0 for the zero Delivery).
func (d Delivery) Offset() int64 { return d.offset }

// A Result says what [Partition.Complete] did with a Delivery.
type Result uint8

const (
	// Completed: the delivery was in flight and now is not; the watermark may have moved.
	Completed Result = iota + 1
	// Stale: the delivery belongs to an earlier generation (taken before a Reset or a rewind), or is
	// the zero Delivery. Nothing changed.
	Stale
	// Duplicate: the delivery was already completed in this generation. Nothing changed.
	Duplicate
)

// String returns "completed", "stale" or "duplicate", and "Result(n)" for any other value.
func (r Result) String() string {
	switch r {
	case Completed:
		return "completed"
	case Stale:
		return "stale"
	case Duplicate:
		return "duplicate"
	}
	return "Result(" + strconv.Itoa(int(r)) + ")"
}
