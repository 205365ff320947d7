package runtime

import (
	"errors"
	"time"
)

type outcomeKind uint8

const (
	kindAck outcomeKind = iota
	kindDrop
	kindRetry
)

// outcome is what Drop and Retry return: the engine sorts it out with errors.As, while errors.Is
// still finds the user's cause through Unwrap.
type outcome struct {
	kind  outcomeKind
	err   error
	after time.Duration // RetryAfter's delay; 0 otherwise
}

func (o *outcome) Error() string {
	if o.err == errDropped || o.err == errRetried { // Drop(nil), Retry(nil): the cause says it all
		return o.err.Error()
	}
	switch o.kind {
	case kindDrop:
		return "tidemark: drop: " + o.err.Error()
	default:
		return "tidemark: retry: " + o.err.Error()
	}
}

func (o *outcome) Unwrap() error { return o.err }

var (
	errDropped = errors.New("tidemark: dropped")         // Drop(nil)'s cause
	errRetried = errors.New("tidemark: retry requested") // Retry(nil)'s and RetryAfter(d, nil)'s
)

// Drop returns the outcome "discard this record": it is settled as done and never handled again
// (DESIGN §3.2). err says why: it is logged at Info (Warn for an error wrapping ErrDecode, a decode
// failure); nil is allowed, for a record a handler only filters out, and logged at Debug (the
// Settled event counts drops either way). Returned under Auto or Tracked by a handler whose ctx the
// runtime cancelled (a drain bound passed, the partition was lost), it counts as a failure like any
// error: the record did not finish and stays uncommitted for the next owner (OutcomeRetry; DESIGN
// §3.7). Under Transactional the ctx is cancelled when its window aborts: the record is read again
// with the whole window, whatever its handler returned. Wrapped in another error (fmt.Errorf with
// %w), an outcome still counts: the outermost Drop or Retry errors.As finds decides, and its err is
// the cause that is logged and dead-lettered, not the wrapping text. errors.As searches depth
// first, an errors.Join's operands in order: in errors.Join(Drop(a), Retry(b)) the Drop decides,
// in errors.Join(b, Drop(a)) too (a plain error is a retry only when no outcome is found), and
// in Retry(RetryAfter(d, a)) the outer Retry decides, so d is not waited.
func Drop(err error) error {
	if err == nil {
		err = errDropped
	}
	return &outcome{kind: kindDrop, err: err}
}

// Retry returns the outcome "handle this record again" under the registration's policy. A plain
// non-nil error from a handler means the same. In the Tracked mode without a copy policy the record
// is handled again in place, after the Backoff, before the records that must stay behind it; in the
// Auto mode it is refused with ErrRetryUnsupported (DESIGN §3.2). err says why; nil is allowed.
// Wrapped in another error, it still counts, as Drop says.
func Retry(err error) error {
	if err == nil {
		err = errRetried
	}
	return &outcome{kind: kindRetry, err: err}
}

// RetryAfter returns the outcome "handle this record again, not before d": a retry copy is produced
// at once with the header x-tidemark-not-before = now + d, and a consumer that receives it early
// parks it until then (DESIGN §3.3). MaxAttempts still applies. err says why; nil is allowed. A
// delay holds the committed position of the copy's partition for its length: for long delays,
// RetryTo a dedicated retry topic. Under Auto and Tracked a copy that cannot be produced leaves the
// record to be handled again in place after the Backoff, not after d
// (docs/retries-and-dead-letters.md). In the Transactional mode an attempt that already published
// makes no copy: its window aborts and the record's partition is paused for d instead
// (docs/transactions.md, RetryAfter in this mode).
func RetryAfter(d time.Duration, err error) error {
	if err == nil {
		err = errRetried
	}
	return &outcome{kind: kindRetry, err: err, after: max(d, time.Millisecond)}
}

// classify sorts a handler's result into its outcome, the user's cause and RetryAfter's delay.
func classify(err error) (outcomeKind, time.Duration, error) {
	if err == nil {
		return kindAck, 0, nil
	}
	var o *outcome
	if errors.As(err, &o) {
		return o.kind, o.after, o.err
	}
	return kindRetry, 0, err
}
