package runtime

import "time"

// An Observer receives the runtime's events, for metrics and tracing adapters. Its methods are
// called synchronously from the runtime's goroutines (poll loops, lanes, committers, rebalance
// callbacks) and must be fast and non-blocking. Embed NopObserver to implement only some methods.
type Observer interface {
	// Delivered: a poll handed Records records of one partition to the runtime (those it had no
	// room for included: they wait in its backlog, and their later admission sends no event);
	// InFlight is what that partition holds now, its backlog excluded.
	Delivered(DeliveredEvent)
	// Settled: one record's handling ended with Outcome, after Duration in the handler. It says
	// what one delivery came to, not what committed: a record handled again sends one event per
	// delivery, an OutcomeAck included when the ack did not stick (its Transactional window aborted,
	// or its partition was revoked while the handler ran past RevokeDrainTimeout and the new owner
	// read it again). Count committed records with Committed events or lag, not with acks
	// (docs/operations.md, Outcomes).
	Settled(SettledEvent)
	// InFlight: periodically (about once per second) per owned partition.
	InFlight(InFlightEvent)
	// Paused: a partition stopped taking new records (true) or took them again (false): it reached
	// its in-flight bound or the subscription's MaxInFlight, or (Transactional) waits for a retry
	// copy that is not yet due; a paused partition that is revoked or lost is reported resumed.
	// Most pauses never reach franz-go's PauseFetchPartitions (docs/consumer-internals.md).
	Paused(PausedEvent)
	// Committed: a committed offset the cluster acknowledged. The Transactional mode sends none:
	// its offsets commit inside its transactions (docs/transactions.md).
	Committed(CommittedEvent)
	// Rebalanced: partitions were assigned, revoked or lost. For revoked and lost partitions it is
	// sent once their dispatching has stopped: no record of theirs starts in a handler afterwards.
	// Manual-partition subscriptions (Partitions) join no group and send none.
	Rebalanced(RebalancedEvent)
}

// Outcome is how a record's handling was settled.
type Outcome uint8

const (
	OutcomeAck           Outcome = iota + 1 // the handler returned nil
	OutcomeDrop                             // Drop, or a panic under PanicDrop
	OutcomeRetry                            // to be handled again: in place, in a re-read window, or by the next owner (a cancelled handler)
	OutcomeRetryRefused                     // a retry asked for under Auto: ErrRetryUnsupported
	OutcomeDecodeFailure                    // dropped: the value did not decode (ErrDecode)
	OutcomePanic                            // a panic under PanicFail, or runtime.Goexit: left uncommitted, the App fails
	OutcomeControl                          // a transaction marker settled by the runtime itself
	OutcomeRetryCopy                        // a retry copy was acknowledged; the original settled
	OutcomeDeadLetter                       // a dead-letter record was acknowledged; the original settled
	OutcomeSpent                            // MaxAttempts reached with no dead-letter topic: dropped
	OutcomeForeignCopy                      // a retry copy made by another group: settled unhandled
)

// String returns the outcome's name, e.g. "ack": "none" for the zero Outcome (a SettledEvent's
// Reason, but for a dead letter), "unknown" for a value past OutcomeForeignCopy.
func (o Outcome) String() string {
	switch o {
	case 0:
		return "none"
	case OutcomeAck:
		return "ack"
	case OutcomeDrop:
		return "drop"
	case OutcomeRetry:
		return "retry"
	case OutcomeRetryRefused:
		return "retry_refused"
	case OutcomeDecodeFailure:
		return "decode_failure"
	case OutcomePanic:
		return "panic"
	case OutcomeControl:
		return "control"
	case OutcomeRetryCopy:
		return "retry_copy"
	case OutcomeDeadLetter:
		return "dead_letter"
	case OutcomeSpent:
		return "spent"
	case OutcomeForeignCopy:
		return "foreign_copy"
	}
	return "unknown"
}

// DeliveredEvent is Observer.Delivered's argument.
type DeliveredEvent struct {
	Group     string
	Topic     string
	Partition int32
	Records   int // records this poll handed over for the partition, transaction markers excepted
	InFlight  int // records the partition holds after it
}

// SettledEvent is Observer.Settled's argument.
type SettledEvent struct {
	Group      string
	Topic      string
	Partition  int32
	Offset     int64
	Generation uint64 // the runtime's assignment generation of the partition (Delivery.Generation)
	// Attempt is the delivery's number (Delivery.Attempt, from 1); 0 for a record settled
	// without its handler (a transaction marker, another group's retry copy). A Transactional
	// record whose attempts were spent in an aborted window is settled without its handler too,
	// with the number of the delivery that spent them.
	Attempt int
	Outcome Outcome
	// Reason says, for OutcomeDeadLetter, what sent the record there: OutcomeDrop,
	// OutcomeDecodeFailure, OutcomeSpent (MaxAttempts reached) or OutcomeRetry (a failure with
	// only DeadLetter declared). 0 otherwise.
	Reason   Outcome
	Err      error         // the handler's error (wrapping ErrRetryUnsupported when refused)
	Duration time.Duration // time in the handler
}

// InFlightEvent is Observer.InFlight's argument.
type InFlightEvent struct {
	Group     string
	Topic     string
	Partition int32
	InFlight  int // records held: queued, running, waiting for a retry (settled ones are not)
	// OldestAge is how long the committable position has stayed on the oldest in-flight record
	// (Tracked; 0 under Auto or when nothing is in flight): a stalled-partition signal. It is
	// measured at the one-second InFlight ticks, so it reads up to about 1 s short: add a second to
	// an alert threshold.
	OldestAge time.Duration
}

// PausedEvent is Observer.Paused's argument.
type PausedEvent struct {
	Group     string
	Topic     string
	Partition int32
	Paused    bool
}

// CommittedEvent is Observer.Committed's argument.
type CommittedEvent struct {
	Group     string
	Topic     string
	Partition int32
	Offset    int64 // the next offset to consume, as committed
}

// RebalancedEvent is Observer.Rebalanced's argument.
type RebalancedEvent struct {
	Group      string
	Kind       string // "assigned", "revoked" or "lost"
	Partitions map[string][]int32
}

// NopObserver ignores every event; embed it to implement part of Observer.
type NopObserver struct{}

func (NopObserver) Delivered(DeliveredEvent)   {}
func (NopObserver) Settled(SettledEvent)       {}
func (NopObserver) InFlight(InFlightEvent)     {}
func (NopObserver) Paused(PausedEvent)         {}
func (NopObserver) Committed(CommittedEvent)   {}
func (NopObserver) Rebalanced(RebalancedEvent) {}
