package runtime

import (
	"slices"
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
	maxAttempts        int // 0: no cap and no copies
	maxAttemptsSet     bool
	deadLetter         string // "": no dead-letter topic
	retryTo            string // "": the default retry address
	retryToSource      bool
	commitInterval     time.Duration // Transactional: window length
	windowTimeout      time.Duration // Transactional: barrier bound
	emptyTopics        []string      // options given "" as their topic: Start reports them
	nilOpts            []int         // positions (from 1) of nil options: Start reports them
}

// noteEmpty remembers an option that named the empty topic, which would otherwise read as unset
// (DeadLetter(os.Getenv("DLQ")) with the variable unset must not turn dead-lettering off). A later
// option of the same name that sets a topic overrides it, as later options do.
func (c *handleConfig) noteEmpty(option, topic string) {
	c.emptyTopics = slices.DeleteFunc(c.emptyTopics, func(o string) bool { return o == option })
	if topic == "" {
		c.emptyTopics = append(c.emptyTopics, option)
	}
}

func defaultHandleConfig() handleConfig {
	return handleConfig{
		workers:            1,
		ordering:           ByPartition,
		maxInFlightPerPart: 1024,
		backoff:            retry.Default(),
		commitInterval:     100 * time.Millisecond,
		windowTimeout:      30 * time.Second,
	}
}

// Handle registers h for the records of sub. It only records: Start validates and reports every
// problem, a nil option among them (a *ConfigError naming Handle and its position, from 1). Handle
// must be called before Start; it panics after.
func Handle(app *App, sub Subscription, h Handler, opts ...HandleOption) {
	cfg := defaultHandleConfig()
	for i, o := range opts {
		if o == nil { // reported by Start
			cfg.nilOpts = append(cfg.nilOpts, i+1)
			continue
		}
		o.applyHandle(&cfg)
	}
	app.register(registration{sub: sub, handler: h, cfg: cfg})
}

// Workers sets how many lanes (goroutines) call the handler at once, overriding the default 1. It
// must be 1 to 65,536; Start fails with a *ConfigError naming Workers otherwise.
func Workers(n int) HandleOption { return handleOption(func(c *handleConfig) { c.workers = n }) }

// An Ordering says which records must be handled one at a time, in offset order (DESIGN §3.6). It
// is a HandleOption: Handle(app, sub, h, Workers(8), ByKey). A BatchHandler's elements settle
// one by one after the batch returns: an element retried in place runs again after the elements
// behind it in its batch settled (docs/batches.md). A retry copy (MaxAttempts, RetryAfter) is out of
// order by nature: it runs in a unit of its own, beside or after later records of its partition
// or key; the record it copies holds those later records until Kafka has acknowledged the copy
// (docs/retries-and-dead-letters.md, Parked copies).
type Ordering uint8

const (
	// ByPartition handles a partition's records one at a time in order; partitions run in
	// parallel. The default.
	ByPartition Ordering = iota
	// ByKey handles records with equal keys (within a partition) one at a time in order; different
	// keys run in parallel; keyless records (a nil key) keep partition order among themselves. An
	// empty key is a key like any other, so keyless and empty-keyed records run apart.
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
// running, waiting for a retry, and, for a Handler, those settled in a lane's take of up to 64
// records of one partition or key not yet ended), overriding the default 1024; 1 to 1,048,576 (a
// *ConfigError at Start otherwise). The bound also applies to the partition's tracker span, from
// the oldest record in flight to the newest delivered, finished ones in between included: a
// partition whose oldest record is stuck is paused once that span reaches n, while
// InFlightEvent.InFlight may read 1. A partition at the bound is paused and resumed once it has
// drained to half (DESIGN §3.6). Under Auto and Tracked, records polled beyond the bound wait in
// the partition's backlog (at most about a bound plus one fetch) and the poll loop holds off while
// that backlog is a full bound; under Transactional one poll can exceed the bound by at most
// MaxPollRecords. A pause becomes franz-go's PauseFetchPartitions only once another partition waits
// for records and a lane is idle or 100 ms have passed (docs/consumer-internals.md, back-pressure).
func MaxInFlightPerPartition(n int) HandleOption {
	return handleOption(func(c *handleConfig) { c.maxInFlightPerPart = n })
}

// MaxInFlight bounds the records the whole subscription may hold; at the bound all its partitions
// are paused until it has drained to half, or, below the bound, until 100 ms have passed: records
// held behind a stuck head stop no other partition while they are fewer than n, but they slow the
// others down to about n minus what they hold per 100 ms, when the others' handlers are fast
// (helper-118: 10 records per 100 ms with n = 40 and 30 stuck). Give n room for more than one
// partition's MaxInFlightPerPartition, or one stuck partition can hold all of it.
// Parked retry copies (not due yet) are held records too: n of them, on a retry topic too, leave no
// room, so no other record of the subscription is handled until one of them has fallen due and been
// handled. 0 (the default) means no bound beyond the per-partition one; a negative n fails Start
// with a *ConfigError naming MaxInFlight.
func MaxInFlight(n int) HandleOption {
	return handleOption(func(c *handleConfig) { c.maxInFlight = n })
}

// Backoff sets the wait before a failed record is handled again, overriding the default of 100 ms
// doubling to 30 s. fn receives the attempt that failed (1 for the first delivery) and its error; a
// negative wait counts as 0. A nil fn fails Start with a *ConfigError naming Backoff.
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

// OnPanic sets the PanicPolicy, overriding PanicFail (DESIGN §3.8). A value other than the three
// policies fails Start with a *ConfigError naming OnPanic.
func OnPanic(p PanicPolicy) HandleOption {
	return handleOption(func(c *handleConfig) { c.panicPolicy = p })
}

// Reply names the topic a JSONReply handler publishes its results to (DESIGN §3.9). Start fails (a
// *ConfigError naming Reply) when the topic does not exist or is read by the subscription (one of
// its topics, its RetryTo topic, or matched by its Pattern and not excluded with
// kgo.ConsumeExcludeTopics): every reply would be handled, and replied to, again.
func Reply(topic string) HandleOption {
	return handleOption(func(c *handleConfig) { c.replyTopic = topic; c.noteEmpty("Reply", topic) })
}

// MaxAttempts caps the deliveries of a record at n, the first included (in-place retries and
// copies alike): a failed delivery below the cap produces a retry copy (DESIGN §3.3); the n-th
// failure is spent and goes to the DeadLetter topic (at least once: a rebalance or crash before the
// commit past it makes the next owner spend it again), or, with none, is dropped with a log line
// and an Observer event (OutcomeSpent). n must be at least 1.
func MaxAttempts(n int) HandleOption {
	return handleOption(func(c *handleConfig) { c.maxAttempts, c.maxAttemptsSet = n, true })
}

// DeadLetter names the dead-letter topic: spent records, dropped records (Drop, decode failures)
// and, without MaxAttempts, the first failure (except a RetryAfter, which always makes a retry
// copy) go there with provenance headers (package dlq); once Kafka has acknowledged them the
// original is settled. Start fails (a *ConfigError naming
// DeadLetter) when the topic does not exist, is read by the subscription (one of its topics, or
// matched by its Pattern and not excluded with kgo.ConsumeExcludeTopics: every dead letter would
// be read again), or is also its RetryTo topic.
func DeadLetter(topic string) HandleOption {
	return handleOption(func(c *handleConfig) { c.deadLetter = topic; c.noteEmpty("DeadLetter", topic) })
}

// RetryTo sends retry copies to topic, partitioned by the producer's partitioner (keys hashed as
// franz-go's default does when ProducerOpts and ClientOpts set none), and adds topic to the
// subscription (same group, handler and mode) so its copies are consumed. Start fails when the
// topic does not exist or is also the DeadLetter topic. Not for manual-partition subscriptions (use
// RetryToSource).
func RetryTo(topic string) HandleOption {
	return handleOption(func(c *handleConfig) {
		c.retryTo, c.retryToSource = topic, false
		c.noteEmpty("RetryTo", topic)
	})
}

// RetryToSource sends each retry copy back to the topic and partition its record came from. It is
// what a single-topic subscription does by default; multi-topic, pattern and manual-partition
// subscriptions must choose it or RetryTo (DESIGN §3.3).
func RetryToSource() HandleOption {
	return handleOption(func(c *handleConfig) {
		c.retryTo, c.retryToSource = "", true
		c.noteEmpty("RetryTo", "(the source)") // overrides a RetryTo("") before it
	})
}

// CommitInterval sets the length of a Transactional window, overriding the default 100 ms: every
// interval the poll loop stops polling, waits for the window's records, and ends its transaction
// (DESIGN §3.4). Longer windows mean fewer transactions and more re-read work after an abort. d
// must be positive; Start fails with a *ConfigError naming CommitInterval otherwise. Auto and
// Tracked subscriptions ignore it: their commits follow franz-go's AutoCommitInterval.
func CommitInterval(d time.Duration) HandleOption {
	return handleOption(func(c *handleConfig) { c.commitInterval = d })
}

// WindowTimeout bounds how long a Transactional window waits for its records before it aborts,
// overriding the default 30 s. Keep it below franz-go's TransactionTimeout (40 s by default) and the
// group's session timeout (DESIGN §3.4). d must be positive; Start fails with a *ConfigError
// naming WindowTimeout otherwise. Auto and Tracked subscriptions ignore it.
func WindowTimeout(d time.Duration) HandleOption {
	return handleOption(func(c *handleConfig) { c.windowTimeout = d })
}
