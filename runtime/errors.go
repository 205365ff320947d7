package runtime

import (
	"errors"
	"fmt"
)

// Errors returned or reported by the runtime, to be matched with errors.Is. Every error Tidemark
// makes starts with "tidemark: "; the causes it only reports in SettledEvent.Err and the log (a
// revoke's, a short batch result's, Drop(nil)'s) are not among these and may change.
var (
	// ErrRetryUnsupported is reported (to the Observer and the log) when a handler asks for a
	// retry in the Auto mode without a retry policy: the record is not handled again (DESIGN §3.2).
	ErrRetryUnsupported = errors.New("tidemark: retry refused: the Auto commit mode has no in-place retry")

	// ErrDecode wraps a decoding failure of an adapter such as JSON. The record is dropped with a
	// log line and an Observer event and never stalls its partition (DESIGN §3.8).
	ErrDecode = errors.New("tidemark: record could not be decoded")

	// ErrClosed is returned by Publish once Shutdown has flushed and closed the App's producer, and
	// by Start and Run on an App that Shutdown stopped before it started.
	ErrClosed = errors.New("tidemark: app closed")

	// ErrStarted is returned by Start on an App that was already started (an App starts once).
	ErrStarted = errors.New("tidemark: app already started")

	// ErrHandlerExited is the Value of the *PanicError that fails the App when a handler or batch
	// handler called runtime.Goexit instead of returning (testing.T.FailNow in a handler, say).
	// That ends its lane's goroutine, which nothing can stop: the records in the handler are held,
	// never committed, and the App shuts down as under PanicFail, whatever OnPanic says.
	ErrHandlerExited = errors.New("tidemark: the handler called runtime.Goexit instead of returning")

	// ErrCommitTimeout is returned (Shutdown: joined, per subscription) or logged (a revoke, a
	// manual subscription's periodic commit) when a commit was not acknowledged within its bound
	// of 5 s (DESIGN §3.7; docs/operations.md, timeouts): franz-go retries a coordinator that is
	// unavailable, loading or moving until then (a manual subscription's error carries the
	// coordinator's last answer too; a group subscription's does not know it). What the commit
	// carried stays uncommitted, as far as this member knows, and is read again by the next owner.
	// It does not wrap context.DeadlineExceeded, which Shutdown returns for a drain whose bound
	// passed with handlers still running.
	ErrCommitTimeout = errors.New("tidemark: commit not acknowledged within 5 s")

	// ErrTrackerFull is a fatal internal error: a partition held more records than its tracker
	// ring covers (MaxInFlightPerPartition + MaxPollRecords + 1). It means pausing failed.
	ErrTrackerFull = errors.New("tidemark: partition tracker full")

	// ErrInstanceFenced fails the App (wrapped with the subscription, the static member's instance
	// id and franz-go's kerr.FencedInstanceID) when another live member joined its consumer group
	// with the same instance id (InstanceID, KIP-345): the broker gave that member this one's
	// partitions; whichever request learns of it first (a fetch, a heartbeat, an autocommit, a
	// Transactional window's offset commit; during a Shutdown, which then returns it too). The
	// App stops instead of joining again, which would fence the other member in turn. Two live
	// instances with one InstanceID are a deployment error (docs/operations.md, static
	// membership).
	ErrInstanceFenced = errors.New("tidemark: static member fenced by another member with its instance id")

	// ErrTopicRecreated fails the App (wrapped with the subscription, the topic and the group)
	// when a topic an Auto, Tracked or manual-partition subscription reads was deleted and created
	// again under its name while the App ran: franz-go keeps the old topic's ID, and its client
	// never reads the new topic (its README, "Topic recreation"). Restart the App: it reads the new
	// topic from the group's committed offsets (Kafka deletes the old topic's with it), so from the
	// subscription's start offset. A Transactional subscription makes its session again instead,
	// and the App's producer forgets a topic it wrote to and writes to the new one
	// (docs/operations.md, deleted and re-created topics).
	ErrTopicRecreated = errors.New("tidemark: a topic was deleted and created again")
)

// A ConfigError is an invalid or conflicting option, returned (joined with the others) by Start
// before any I/O (DESIGN §3.10). Option names the option as the user wrote it, qualified by its
// subscription for a registration's options, and by the subscription's group too when several
// registrations share the subscription (`Topic("orders").Group("billing"): Workers`). A producer
// option refused in ClientOpts is named ProducerOpts: the App's producer takes ClientOpts too, and
// ProducerOpts is where producer options belong (docs/operations.md). Start's checks of the
// cluster fail with one too, after its first request: a subscribed, RetryTo, DeadLetter or Reply
// topic that does not exist (Err wraps kerr.UnknownTopicOrPartition) or that the cluster refuses to
// describe (Err wraps its error).
type ConfigError struct {
	Option string // "Brokers", "MaxPollRecords", "Topic(\"payouts\").Group", "Topic(\"payouts\"): Workers", ...
	Err    error
}

func (e *ConfigError) Error() string { return "tidemark: " + e.Option + ": " + e.Err.Error() }

// Unwrap returns the underlying problem.
func (e *ConfigError) Unwrap() error { return e.Err }

func configErr(option, format string, args ...any) error {
	return &ConfigError{Option: option, Err: fmt.Errorf(format, args...)}
}

// A PanicError is a handler panic recovered by the runtime. Under the default OnPanic(PanicFail)
// the App shuts down gracefully and Run returns it; in the Tracked mode the record is not
// committed (DESIGN §3.8).
type PanicError struct {
	Value     any    // what the handler panicked with
	Stack     []byte // the goroutine's stack at the panic
	Topic     string
	Partition int32
	Offset    int64
}

func (e *PanicError) Error() string {
	return fmt.Sprintf("tidemark: handler panicked on %s/%d@%d: %v", e.Topic, e.Partition, e.Offset, e.Value)
}

// Unwrap returns the panic value when it is an error, so errors.Is sees through a panic(err).
func (e *PanicError) Unwrap() error {
	err, _ := e.Value.(error)
	return err
}
