package runtime

import (
	"context"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A Delivery is one record handed to a Handler, with what the runtime knows about it. It is valid
// for the duration of the handler call; the *kgo.Record it carries may be kept.
type Delivery struct {
	rec        *kgo.Record
	group      string
	generation uint64
	attempt    int
	reply      func(ctx context.Context, value []byte) error // set when the registration has Reply
	pubs       publishes                                     // Transactional: what the handler published
}

type deliveryKey struct{}

// DeliveryFrom returns the Delivery a JSON or JSONReply handler's ctx belongs to, so a typed handler
// can still read the record, its Attempt and its generation. ok is false for other contexts.
func DeliveryFrom(ctx context.Context) (d *Delivery, ok bool) {
	d, ok = ctx.Value(deliveryKey{}).(*Delivery)
	return d, ok
}

// Record returns the Kafka record: topic, partition, offset, key, value, headers, leader epoch. It
// is read-only: to publish it elsewhere, publish a copy (Publish sets a record's Topic, Partition
// and Offset), with retry.UserHeaders(r.Headers) rather than r.Headers when it may be a retry copy:
// a group that reads a record with Tidemark's retry headers takes it for a retry copy, and skips
// one another group made (OutcomeForeignCopy) or counts its attempts on from the copy's
// (docs/retries-and-dead-letters.md, Forwarding a record). The runtime keeps the topic, partition,
// offset and leader epoch it had when polled, for its commits, attempts, events and the provenance
// of its dead letters and retry copies, so a changed record cannot move them; its key, value and
// headers are read again after the handler (for a retry copy, a dead letter, a reply's key).
func (d *Delivery) Record() *kgo.Record { return d.rec }

// Attempt returns the delivery's number, starting at 1: the record's retry count header
// (x-tidemark-retry-count) + the in-place retries so far + (Transactional) its failed deliveries
// in aborted windows since the App started + 1 (DESIGN §3.3, §3.4). The header's count is capped
// at retry.MaxCount; the sum saturates at math.MaxInt, so on a 32-bit platform it stops at
// retry.MaxCount where a 64-bit one goes on counting.
func (d *Delivery) Attempt() int { return d.attempt }

// Group returns the consumer group of the subscription, or "" for a manual-partition subscription
// without one.
func (d *Delivery) Group() string { return d.group }

// Generation returns the runtime's assignment generation of the record's partition: it grows by
// one every time the subscription is assigned a partition, so two deliveries of one offset with
// different generations came from different assignments. It is not the group protocol's
// generation.
func (d *Delivery) Generation() uint64 { return d.generation }
