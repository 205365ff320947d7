// Package tracker computes, per partition, the next offset a consumer group may commit, without
// locks on the hot path. The runtime records each record it admits with [Partition.Deliver],
// whoever settles the record calls [Partition.Complete], and the committer reads [Partition.Moved]
// (or [Tracker.Moved] for every partition) to call Kafka's MarkCommitOffsets once per partition
// each time the position moves. The package knows nothing of Kafka clients: offsets
// are int64 record offsets and epochs are the records' int32 leader epochs, as the broker sent them.
//
// # The rule
//
// The committable next offset of a partition, its [Watermark], is the lowest delivered offset still
// in flight, or, when nothing is in flight, the highest delivered offset + 1 (DESIGN §3.1). Only
// delivered offsets are tracked, so offsets the consumer never receives (aborted records under
// read_committed, compacted records) never hold the position back. Before the first delivery of a
// generation there is no watermark. Example: deliver 0, 1, 3; complete 0 → 1; complete 1 → 3 (2
// never came); complete 3 → 4. A watermark carries the leader epoch of the record it came from: the
// delivery at the watermark while one is in flight, else the highest delivered record.
//
// # Generations
//
// Within a generation the watermark only moves forward. [Partition.Reset] (a revoke or a seek)
// starts a new generation: the state is cleared and completing a delivery taken before it changes
// nothing ([Stale]). A delivery at or below the highest delivered offset (a client-side rewind, after
// an EOS abort or a data-loss reset) starts a new generation by itself, so a late completion of the
// pre-rewind delivery of the same offset changes nothing either; deliveries below the rewind's
// offset, which nothing delivers again, stay in flight and hold the watermark until completed (a
// log truncation may rewind the consumer above records still running). An in-place retry is not a new
// delivery: its caller completes the original once the record is finally settled. A second
// completion of the same delivery is ignored ([Duplicate]).
//
// # Capacity
//
// Each partition keeps its deliveries in a ring of the capacity given to [NewPartition] (the runtime
// passes MaxInFlightPerPartition + MaxPollRecords + 1). The ring holds the oldest delivery still in
// flight and every delivery after it, settled or not ([Partition.Span]); when it holds capacity of
// them, Deliver returns [ErrFull] and records nothing. The runtime never gets there: it stops
// admitting a partition's records once its span reaches MaxInFlightPerPartition, so a record that
// stays in flight (parked for a retry) pauses its partition once that many records pile up behind
// it, as DESIGN §3.3 says, and it treats ErrFull as a fatal internal error (runtime.ErrTrackerFull).
//
// # Concurrency
//
// One goroutine at a time per partition, the deliverer, calls Deliver, Reset and Span (the runtime
// calls them from its poll loop and its lanes, serialised by its dispatcher's lock, which also
// orders one call before the next). Complete may be called from
// any goroutine at any time; CompleteDeferred, Advance, Watermark, Moved, Oldest, InFlight and
// Generation too. CompleteDeferred completes without moving the head: a goroutine completing many
// deliveries in a row (the runtime's lane, a take of records in offset order) calls Advance once
// after them, and readers move the head past whatever it left meanwhile. Deliver and
// Complete take no lock and never wait: a delivery is a slot in the ring whose word packs its sequence
// number and state, so a completion is one compare-and-swap, and the head of the ring advances by
// compare-and-swap over completed slots. Readers take a consistent snapshot without blocking writers:
// they read again if the ring moved under them, and wait out the short setting-up of a new
// generation. [Tracker] maps (topic, partition) to Partitions under a mutex, which only its
// structural calls take.
package tracker
