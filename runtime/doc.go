// Package runtime is Tidemark's public API and engine: an App consumes Kafka topics with franz-go,
// runs each record through a Handler on worker lanes, and turns the handler's outcome (ack, drop,
// retry) into committed offsets per partition and consumer group.
//
// The package is named runtime as DESIGN §1 asks; a program that also needs the standard
// library's runtime imports one of them under another name.
//
// # Lifecycle
//
// New records options, Handle registers a handler on a Subscription, Start validates everything
// (every problem a *ConfigError, joined) and returns once every group subscription has its first
// assignment; Run is Start, a wait for its ctx or a fatal error, then Shutdown bounded by
// ShutdownTimeout. Shutdown stops polling, drains running handlers, commits what finished, and
// leaves the group, in that order (DESIGN §3.7).
//
// # Commit modes
//
//	outcome       Auto (default)                 Tracked                         Transactional(id)
//	ack (nil)     marked; autocommit commits it  completes the offset; the       counted in the window;
//	                                             position moves up               committed with its outputs
//	Drop(err)     as ack                         as ack                          as ack
//	Retry(err)    refused: ErrRetryUnsupported   handled again in place after    the window aborts and is
//	                                             Backoff; the position waits     read again (docs/transactions.md)
//
// With a copy policy (MaxAttempts, RetryAfter, DeadLetter), a retry becomes a retry copy or a
// dead letter in every mode (DESIGN §3.3).
//
// Auto marks a record once its handler has returned and franz-go's autocommit commits the marks:
// under ByKey and Unordered a mark may pass records of other keys still in flight, so after a crash
// those may be committed unprocessed. Tracked
// commits, per partition, the lowest offset still in flight (or the highest delivered offset + 1):
// nothing is lost; records after an unfinished one may be read again (DESIGN §3.1–3.2).
//
// # Lanes and ordering
//
// Workers(n) lanes take ready work dynamically: ByPartition (default) keeps a partition's records
// in order, ByKey keeps equal keys in order, Unordered keeps none (DESIGN §3.6). The poll loop never
// blocks on a lane: a partition holding MaxInFlightPerPartition records is paused and resumed once
// it has drained to half; what was polled beyond the bound waits in the partition's backlog.
//
// # Rebalances
//
// On revoke the partition's queued records are dropped, its running handlers get up to
// RevokeDrainTimeout, what finished is marked and committed, and completions that arrive later
// change nothing. On loss nothing is committed. Transaction markers never reach handlers and are
// settled by the runtime, so lag reaches 0 (DESIGN §3.7, §3.7a).
//
// # Options the runtime owns
//
// For group subscriptions Tidemark sets, after the user's ClientOpts and Subscription.Config:
// ConsumerGroup, ConsumeTopics (and ConsumeRegex), BlockRebalanceOnPoll, OnPartitionsAssigned,
// OnPartitionsRevoked, OnPartitionsLost, KeepControlRecords, ConsumeStartOffset, ConsumeResetOffset
// and InstanceID (with runtime.InstanceID); for Partitions subscriptions, no group, topics or
// partitions of the user's; in the Auto and Tracked modes AutoCommitMarks and AutoCommitCallback;
// in the Transactional mode TransactionalID, read_committed and a RecordPartitioner that wraps the
// user's to pin retry copies. A Transactional session takes the App's ProducerOpts too, between
// ClientOpts and Subscription.Config: the subscription's own options win. The isolation level
// (read_committed) is set before the user's options, so they can override it, except in the
// Transactional mode, which always reads read_committed. Every client, the App's producer's too,
// gets a WithLogger that passes franz-go's lines to the user's own kgo.Logger and watches for a
// topic deleted and created again (ErrTopicRecreated); a group subscription's client, a hook
// (WithHooks, beside the user's) that watches for a fence (ErrInstanceFenced). Start refuses the
// options franz-go accepts that it cannot take back: kgo.ConsumeRegex outside a Pattern,
// kgo.InstanceID without runtime.InstanceID, kgo.TransactionalID in an Auto or Tracked
// subscription's Config.
package runtime
