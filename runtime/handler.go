package runtime

import (
	"context"
	"encoding/json"
	"fmt"
)

// A Handler processes one delivered record; the error it returns is the outcome (DESIGN §3.2): nil
// acks, Drop(err) drops, Retry(err) or any other error retries under the registration's policy.
// Up to Workers(n) lanes call it at once; records that must stay ordered never overlap. ctx ends
// once the record can no longer be committed here (partition lost, revoke or shutdown bound passed),
// not before.
type Handler interface {
	HandleDelivery(ctx context.Context, d *Delivery) error
}

// HandlerFunc adapts a plain function to a Handler.
type HandlerFunc func(ctx context.Context, d *Delivery) error

// HandleDelivery calls f(ctx, d).
func (f HandlerFunc) HandleDelivery(ctx context.Context, d *Delivery) error { return f(ctx, d) }

// JSON adapts a function of a decoded value to a Handler: the record's value is decoded with
// encoding/json into a T. A value that does not decode is dropped with an error wrapping ErrDecode
// (DESIGN §3.8): the engine logs it and reports it, and the partition moves on.
func JSON[T any](fn func(ctx context.Context, v T) error) Handler {
	return HandlerFunc(func(ctx context.Context, d *Delivery) error {
		var v T
		if err := json.Unmarshal(d.Record().Value, &v); err != nil {
			return Drop(fmt.Errorf("%w: %w", ErrDecode, err))
		}
		return fn(ctx, v)
	})
}
