package runtime

import (
	"log/slog"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// An Option configures an App, for New. Later options override earlier ones.
type Option interface{ applyApp(*appConfig) }

type appOption func(*appConfig)

func (f appOption) applyApp(c *appConfig) { f(c) }

type appConfig struct {
	brokers            []string
	defaultGroup       string
	clientOpts         []kgo.Opt
	logger             *slog.Logger
	observer           Observer
	shutdownTimeout    time.Duration
	revokeDrainTimeout time.Duration
	instanceID         string
	maxPollRecords     int
	producerOpts       []kgo.Opt
	queueTimeout       time.Duration
	flushTimeout       time.Duration
	nilOpts            []error // *ConfigErrors for nil options given to New, ClientOpts, ProducerOpts
}

// appendOpts appends opts to dst, leaving out nil ones: each is a *ConfigError naming option (its
// position, from 1) in c.nilOpts, which Start reports (a nil kgo.Opt makes franz-go panic).
func (c *appConfig) appendOpts(dst []kgo.Opt, option string, opts []kgo.Opt) []kgo.Opt {
	for i, o := range opts {
		if o == nil {
			c.nilOpts = append(c.nilOpts, configErr(option, "option %d is nil", i+1))
			continue
		}
		dst = append(dst, o)
	}
	return dst
}

func defaultAppConfig() appConfig {
	return appConfig{
		shutdownTimeout:    30 * time.Second,
		revokeDrainTimeout: 5 * time.Second,
		maxPollRecords:     500,
		flushTimeout:       30 * time.Second,
		observer:           NopObserver{},
	}
}

// Brokers sets the seed brokers ("host:port") of every subscription's client. Required: Start
// fails with a *ConfigError naming Brokers when there are none, or one is empty (an unset
// environment variable).
func Brokers(addrs ...string) Option {
	return appOption(func(c *appConfig) { c.brokers = append(c.brokers, addrs...) })
}

// DefaultGroup sets the consumer group of every group subscription that does not name one with
// Subscription.Group. Manual-partition subscriptions never use it (DESIGN §3.10).
func DefaultGroup(group string) Option {
	return appOption(func(c *appConfig) { c.defaultGroup = group })
}

// ClientOpts adds franz-go options to every subscription's client: connection settings (TLS, SASL,
// dialer), timeouts, fetch sizes. Options each commit mode owns (AutoCommitMarks,
// BlockRebalanceOnPoll, the OnPartitions* callbacks, KeepControlRecords, ConsumerGroup,
// ConsumeTopics; a Partitions subscription takes no group, topics or ConsumePartitions of these)
// are applied after these and win; the isolation level (read_committed by default) is applied
// before them, so it can be overridden, except by a Transactional subscription, which always reads
// read_committed (DESIGN §3.10). A nil option fails Start with a *ConfigError naming ClientOpts and
// its position in this call, from 1; so does an option franz-go refuses on some subscription's
// client (kgo.ConsumeExcludeTopics where a subscription has no Pattern: give it to that Pattern's
// Subscription.Config), naming the subscription, and an option franz-go accepts that Tidemark
// cannot take back: kgo.ConsumeRegex (use Pattern), kgo.InstanceID without runtime.InstanceID
// (docs/operations.md, "franz-go options Tidemark sets").
func ClientOpts(opts ...kgo.Opt) Option {
	return appOption(func(c *appConfig) { c.clientOpts = c.appendOpts(c.clientOpts, "ClientOpts", opts) })
}

// Logger sets the structured logger, overriding slog.Default(); a nil l keeps slog.Default(), as
// New reads it (a slog.SetDefault after New does not reach the App). Record-level lines carry the
// keys subscription, group and mode, then topic, partition, offset, generation and attempt (a
// batch's lines: its first element's, and batch, its size).
func Logger(l *slog.Logger) Option {
	return appOption(func(c *appConfig) { c.logger = l })
}

// Observe sets the Observer that receives the runtime's events (metrics adapters), overriding the
// no-op default. Its methods are called from the runtime's goroutines and must not block, panic (a
// panic there is not recovered) or call runtime.Goexit. A nil o fails Start with a *ConfigError
// naming Observe.
func Observe(o Observer) Option {
	return appOption(func(c *appConfig) { c.observer = o })
}

// ShutdownTimeout bounds the Shutdown that Run performs when its ctx ends or a fatal error
// happens, overriding the default 30s. Size it below the orchestrator's grace period (DESIGN §3.7).
// d must be positive; Start fails with a *ConfigError naming ShutdownTimeout otherwise.
func ShutdownTimeout(d time.Duration) Option {
	return appOption(func(c *appConfig) { c.shutdownTimeout = d })
}

// RevokeDrainTimeout bounds how long a revoke waits for the revoked partitions' running handlers
// before it commits what finished and cancels their contexts, overriding the default 5s. Keep it
// below the group's rebalance timeout (DESIGN §3.7). d must be positive; Start fails with a
// *ConfigError naming RevokeDrainTimeout otherwise.
func RevokeDrainTimeout(d time.Duration) Option {
	return appOption(func(c *appConfig) { c.revokeDrainTimeout = d })
}

// InstanceID turns on static group membership (KIP-345): subscription i's client joins with the
// instance id "<id>-<i>", so a restarted instance takes its partitions back without a rebalance
// and two subscriptions never fence each other. id must be stable per running instance (a pod
// name). A static member sends no LeaveGroup when it shuts down (franz-go, KIP-345): its partitions
// wait for it to come back, or for its session timeout, before they move.
func InstanceID(id string) Option {
	return appOption(func(c *appConfig) { c.instanceID = id })
}

// MaxPollRecords bounds how many records the poll loop queues under one hold of the dispatcher's
// lock, overriding the default 500; 1 to 1,048,576 (a *ConfigError at Start otherwise). Under Auto
// and Tracked a poll takes everything franz-go has buffered (so it fetches the next at once) and
// queues it in pieces of this many; under Transactional it is how many records one poll takes, and
// a partition's held records can exceed MaxInFlightPerPartition by at most this many (DESIGN §3.6,
// docs/consumer-internals.md).
func MaxPollRecords(n int) Option {
	return appOption(func(c *appConfig) { c.maxPollRecords = n })
}

// ProducerOpts adds franz-go options for the App's producer (and the Transactional sessions, which
// produce too): linger (Tidemark's default is 0, since every publish waits for its
// acknowledgement), batch size, MaxBufferedRecords, compression. They come after the connection
// settings shared through ClientOpts. Idempotence and acks=all stay on (DESIGN §3.9): Start fails
// with a *ConfigError naming ProducerOpts on kgo.DisableIdempotentWrite, kgo.TransactionalID (the
// App's producer is not transactional), kgo.ManualFlushing (a Publish waits for its
// acknowledgement: nothing would flush it) or kgo.DefaultProduceTopicAlways (records would leave
// for another topic than the one named), here or in ClientOpts; on a consumer or group option here;
// or on options franz-go rejects. A Publish before Start fails on them too. Under a linger, a
// Publish whose ctx ends while its record waits in a batch behind another returns ErrUnconfirmed,
// and the record goes out with the batch (App.Publish); one whose ctx ends while its record leads
// the batch has franz-go fail the whole batch, unsent, and the others (Publishes, retry copies,
// dead letters) are produced again, so only its own record is not written (while short ctxs keep
// leading batches, a Publish may wait out several lingers). A kgo.RecordPartitioner here or in
// ClientOpts partitions everything Tidemark's clients produce, except retry copies going back to
// their source partition. QueueTimeout counts records against MaxBufferedRecords; with
// kgo.MaxBufferedBytes too, a Publish waiting for byte space is bounded by its ctx (and Shutdown),
// not by QueueTimeout. A nil option fails Start with a *ConfigError naming ProducerOpts and its
// position in this call, from 1.
func ProducerOpts(opts ...kgo.Opt) Option {
	return appOption(func(c *appConfig) { c.producerOpts = c.appendOpts(c.producerOpts, "ProducerOpts", opts) })
}

// QueueTimeout bounds how long Publish waits for buffer space (franz-go's MaxBufferedRecords,
// default 50,000 records; not MaxBufferedBytes, see ProducerOpts) before it fails with
// ErrQueueFull, on the App's producer and in a Transactional session alike (there the failed
// publish aborts its window). The default, 0, waits as long as the publish's ctx allows. It bounds only that wait: a record already buffered or sent is not
// cancelled by it, and with the idempotent producer a sent request is never cancelled (DESIGN §3.9).
// A negative d fails Start with a *ConfigError naming QueueTimeout.
func QueueTimeout(d time.Duration) Option {
	return appOption(func(c *appConfig) { c.queueTimeout = d })
}

// FlushTimeout bounds how long Shutdown waits for produced records (replies, publishes) to reach
// the brokers, overriding the default 30s. Records still unconfirmed then are counted by
// App.Unflushed, and Shutdown returns an error wrapping ErrUnflushed (DESIGN §3.7). d must be
// positive; Start fails with a *ConfigError naming FlushTimeout otherwise.
func FlushTimeout(d time.Duration) Option {
	return appOption(func(c *appConfig) { c.flushTimeout = d })
}
