package runtime

import (
	"time"

	"github.com/tidemark-io/tidemark/retry"
)

// A HandleOption configures one registration, for Handle. Later options override earlier ones.
type HandleOption interface{ applyHandle(*handleConfig) }

type handleOption func(*handleConfig)

func (f handleOption) applyHandle(c *handleConfig) { f(c) }

type handleConfig struct {
	workers            int
	ordering           Ordering
	maxInFlight        int
	maxInFlightPerPart int
	backoff            retry.Backoff
	panicPolicy        PanicPolicy
	replyTopic         string
}

func defaultHandleConfig() handleConfig {
	return handleConfig{
		workers:            1,
		ordering:           ByPartition,
		maxInFlightPerPart: 1024,
		backoff:            retry.Default(),
	}
}

// Handle registers h for the records of sub. It only records: Start validates and reports every
// problem. Handle must be called before Start.
func Handle(app *App, sub Subscription, h Handler, opts ...HandleOption) {
	cfg := defaultHandleConfig()
	for _, o := range opts {
		o.applyHandle(&cfg)
	}
	app.mu.Lock()
	defer app.mu.Unlock()
	app.regs = append(app.regs, registration{sub: sub, handler: h, cfg: cfg})
}

// Workers sets how many lanes (goroutines) call the handler at once, overriding the default 1. It
// must be at least 1.
func Workers(n int) HandleOption { return handleOption(func(c *handleConfig) { c.workers = n }) }

// An Ordering says which records must be handled one at a time, in offset order (DESIGN §3.6). It
// is a HandleOption: Handle(app, sub, h, Workers(8), ByKey).
type Ordering uint8

const (
	// ByPartition handles a partition's records one at a time in order; partitions run in
	// parallel. The default.
	ByPartition Ordering = iota
	// ByKey handles records with equal keys (within a partition) one at a time in order; different
	// keys run in parallel; keyless records keep partition order among themselves.
	ByKey
	// Unordered handles any record on any idle lane.
	Unordered
)

func (o Ordering) applyHandle(c *handleConfig) { c.ordering = o }

// String returns "ByPartition", "ByKey" or "Unordered".
func (o Ordering) String() string {
	switch o {
	case ByKey:
		return "ByKey"
	case Unordered:
		return "Unordered"
	default:
		return "ByPartition"
	}
}

// MaxInFlightPerPartition bounds the records one partition may hold in the runtime (queued,
// running, waiting for a retry), overriding the default 1024. A partition at the bound is paused
// with PauseFetchPartitions and resumed once it has drained to half; one poll can exceed the bound
// by at most MaxPollRecords (DESIGN §3.6).
func MaxInFlightPerPartition(n int) HandleOption {
	return handleOption(func(c *handleConfig) { c.maxInFlightPerPart = n })
}

// MaxInFlight bounds the records the whole subscription may hold; at the bound all its partitions
// are paused until it has drained to half. 0 (the default) means no bound beyond the per-partition
// one.
func MaxInFlight(n int) HandleOption {
	return handleOption(func(c *handleConfig) { c.maxInFlight = n })
}

// Backoff sets the wait before a failed record is handled again, overriding the default of 100 ms
// doubling to 30 s. fn receives the attempt that failed (1 for the first delivery) and its error.
func Backoff(fn func(attempt int, err error) time.Duration) HandleOption {
	return handleOption(func(c *handleConfig) { c.backoff = fn })
}

// A PanicPolicy says what a recovered handler panic means (DESIGN §3.8).
type PanicPolicy uint8

const (
	// PanicFail shuts the App down gracefully and makes Run return the *PanicError; the record is
	// not committed in the Tracked mode. The default.
	PanicFail PanicPolicy = iota
	// PanicRetry treats a panic as Retry.
	PanicRetry
	// PanicDrop treats a panic as Drop.
	PanicDrop
)

// OnPanic sets the PanicPolicy, overriding PanicFail.
func OnPanic(p PanicPolicy) HandleOption {
	return handleOption(func(c *handleConfig) { c.panicPolicy = p })
}

// Reply names the topic a JSONReply handler publishes its results to (DESIGN §3.9).
func Reply(topic string) HandleOption {
	return handleOption(func(c *handleConfig) { c.replyTopic = topic })
}
