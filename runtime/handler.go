package runtime

import (
	"context"
	"encoding/json"
	"fmt"
)

// A Handler processes one delivered record; the error it returns is the outcome (DESIGN §3.2): nil
// acks, Drop(err) drops, Retry(err) or any other error retries under the registration's policy. Up
// to Workers(n) lanes call it at once; records that must stay ordered never overlap (retry copies
// aside: see Ordering). ctx ends once the record can no longer be committed here (partition lost,
// revoke or shutdown bound passed), not before.
//
// ctx is not the call's own: it is its partition's (under Transactional, its window's), so it stays
// live after HandleDelivery returns, and work the handler leaves running with it ends when the
// partition is revoked or lost, the App has stopped or (Transactional) the window has ended.
// context.Cause(ctx) then says which: "tidemark: partition revoked" (after the revoke's drain),
// "tidemark: partition revoked and its drain bound passed" (RevokeDrainTimeout), "tidemark:
// partition lost", "tidemark: shutdown bound passed", "tidemark: app stopped" (a clean Shutdown of
// a Partitions subscription; a group subscription's partitions are revoked as it leaves the group:
// "partition revoked"). "shutdown bound passed" ends every partition's ctx, idle ones too. Under
// Transactional the window's ctx ends with txn.ErrClosed ("tidemark: transaction window closed")
// when the window ends, a clean Shutdown's last one included, or with its abort cause: "tidemark: a
// partition was revoked or lost during the window" on a rebalance, "tidemark: a handler asked for a
// retry: ..." on a retry, and so on. ctx carries the values of Start's ctx but not its
// cancellation: Run's ctx ending starts a Shutdown, which bounds the handlers.
type Handler interface {
	HandleDelivery(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a plain function to a Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// HandleDelivery calls f(ctx, d).
func (f HandlerFunc) HandleDelivery(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// JSON adapts a function of a decoded value to a Handler: the record's value is decoded with
// encoding/json into a T; DeliveryFrom(ctx) gives fn the Delivery. A value that does not decode is
// dropped with an error wrapping ErrDecode (DESIGN §3.8): the engine logs it and reports it, and
// the partition moves on. A JSON null decodes, as encoding/json has it, to T's zero value (nil for
// a pointer T), which fn receives. A nil or empty value (a compacted topic's tombstone) does not
// decode: it is dropped, or dead-lettered with DeadLetter, like any bad value; to act on
// tombstones, use a HandlerFunc that checks d.Record().Value == nil before decoding. A nil fn gives
// a nil Handler, which Start reports.
func JSON[T any](fn func(ctx context.Context, v T) error) Handler {
	if fn == nil {
		return nil
	}
	return HandlerFunc(func(ctx context.Context, d *Delivery) error {
		var v T
		if err := json.Unmarshal(d.Record().Value, &v); err != nil {
			return Drop(fmt.Errorf("%w: %w", ErrDecode, err))
		}
		return fn(context.WithValue(ctx, deliveryKey{}, d), v)
	})
}

// JSONReply adapts a function that returns a result to a Handler whose result is published, as
// JSON, to the registration's Reply topic with the input record's key, and acknowledged by the
// brokers, before the input is settled (DESIGN §3.9). A value that does not decode is dropped
// (ErrDecode); a result that does not encode is dropped too. A reply that fails to publish retries
// the input: in place in the Tracked mode; under Auto the retry is refused, so that reply is lost
// (logged, ErrRetryUnsupported). Start fails with a *ConfigError naming JSONReply when the
// registration has no Reply. A nil fn gives a nil Handler, which Start reports.
func JSONReply[T, R any](fn func(ctx context.Context, v T) (R, error)) Handler {
	if fn == nil {
		return nil
	}
	return replyHandler(func(ctx context.Context, d *Delivery) error {
		var v T
		if err := json.Unmarshal(d.Record().Value, &v); err != nil {
			return Drop(fmt.Errorf("%w: %w", ErrDecode, err))
		}
		r, err := fn(context.WithValue(ctx, deliveryKey{}, d), v)
		if err != nil {
			return err
		}
		b, err := json.Marshal(r)
		if err != nil {
			return Drop(fmt.Errorf("tidemark: encode reply: %w", err))
		}
		if err := d.reply(ctx, b); err != nil {
			return Retry(fmt.Errorf("tidemark: reply: %w", err))
		}
		return nil
	})
}

// replyHandler marks a Handler that publishes a reply, so Start can insist on Reply(topic).
type replyHandler func(ctx context.Context, d *Delivery) error

func (f replyHandler) HandleDelivery(ctx context.Context, d *Delivery) error { return f(ctx, d) }
