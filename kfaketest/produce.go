package kfaketest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/internal/probe"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Produce writes the records synchronously and returns them (the same pointers) with Partition
// and Offset set, failing the test on the first error. Each record needs its Topic. A record with
// a Key goes where franz-go's default partitioner (and Kafka's Java client) puts that key
// (murmur2); a record without a Key goes to its Record.Partition, 0 unless set. Use ProduceTo to
// pin keyed records.
func (c *Cluster) Produce(t testing.TB, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	out, err := c.ProduceContext(ctx, recs...)
	if err != nil {
		t.Fatalf("kfaketest: Produce: %v", err)
	}
	return out
}

// ProduceContext is Produce for programs. It returns the records once all are acknowledged,
// or the first error (wrapping the kerr error, or ctx's error) naming the record's topic. A
// produce the cluster holds (HoldProduce) ends with ctx too, its records still in flight.
func (c *Cluster) ProduceContext(ctx context.Context, recs ...*kgo.Record) ([]*kgo.Record, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	return produceSync(ctx, c.cl, recs)
}

// ProduceTo is Produce with every record pinned to partition, whether or not it has a key.
func (c *Cluster) ProduceTo(t testing.TB, partition int32, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	out, err := c.ProduceToContext(ctx, partition, recs...)
	if err != nil {
		t.Fatalf("kfaketest: ProduceTo: %v", err)
	}
	return out
}

// ProduceToContext is ProduceTo for programs. A partition the topic does not have fails the
// record with franz-go's "invalid record partitioning choice" error. A partition added since the
// helper client last loaded the topic's metadata (kadm CreatePartitions) is written once the
// client has refreshed it (up to 2 s), if every record was refused: records are never produced
// twice, so a call that wrote some of them (another topic's, or the refresh landed during an
// attempt) fails with the refusal.
func (c *Cluster) ProduceToContext(ctx context.Context, partition int32, recs ...*kgo.Record) ([]*kgo.Record, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	for _, r := range recs {
		pin(ctx, r, partition)
	}
	errs, err := produceEach(ctx, c.cl, recs)
	if err != nil || !allUnknownPartition(errs) || !c.hasPartitions(ctx, recs, partition) {
		return produced(recs, errs, err)
	}
	// Every record was refused before it was sent, none written: the client has not loaded the
	// partition yet. Produce them all again once it has; never again after any was written.
	c.cl.ForceMetadataRefresh()
	for range 40 {
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("produce: %w", context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
		if errs, err = produceEach(ctx, c.cl, recs); err != nil || !allUnknownPartition(errs) {
			break // written, or some were: those refused now stay so (they would follow the written)
		}
	}
	return produced(recs, errs, err)
}

// allUnknownPartition reports whether every record failed with franz-go's refusal of a partition
// its metadata does not have: none was sent.
func allUnknownPartition(errs []error) bool {
	for _, err := range errs {
		if err == nil || !unknownPartition(err) {
			return false
		}
	}
	return len(errs) > 0
}

// unknownPartition reports whether err is franz-go's refusal of a record pinned to a partition
// its metadata does not have (an unexported error: matched by its text).
func unknownPartition(err error) bool {
	return strings.Contains(err.Error(), "invalid record partitioning choice")
}

// hasPartitions reports whether the cluster says every record's topic has partition, asking a
// broker directly (the client's own metadata requests may be answered from its cache); false if
// it cannot tell.
func (c *Cluster) hasPartitions(ctx context.Context, recs []*kgo.Record, partition int32) bool {
	var topics []string
	for _, r := range recs {
		if !slices.Contains(topics, r.Topic) {
			topics = append(topics, r.Topic)
		}
	}
	resp, err := probe.Metadata(ctx, c.cl, topics...)
	if err != nil || len(resp.Topics) != len(topics) {
		return false
	}
	for _, t := range resp.Topics {
		if t.ErrorCode != 0 || !slices.ContainsFunc(t.Partitions, func(p kmsg.MetadataResponseTopicPartition) bool {
			return p.Partition == partition
		}) {
			return false
		}
	}
	return true
}

// ProduceValues writes one keyless record per value to the topic's partition, in order, and
// returns them with their offsets.
func (c *Cluster) ProduceValues(t testing.TB, topic string, partition int32, values ...string) []*kgo.Record {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	out, err := c.ProduceValuesContext(ctx, topic, partition, values...)
	if err != nil {
		t.Fatalf("kfaketest: ProduceValues: %v", err)
	}
	return out
}

// ProduceValuesContext is ProduceValues for programs.
func (c *Cluster) ProduceValuesContext(ctx context.Context, topic string, partition int32, values ...string) ([]*kgo.Record, error) {
	return c.ProduceToContext(ctx, partition, valueRecords(topic, values)...)
}

func valueRecords(topic string, values []string) []*kgo.Record {
	recs := make([]*kgo.Record, len(values))
	for i, v := range values {
		recs[i] = &kgo.Record{Topic: topic, Value: []byte(v)}
	}
	return recs
}

// ProduceTxn writes the records in one transaction with transactional id txnID, then commits it
// (commit true) or aborts it, and returns the records with Partition and Offset set. Records are
// partitioned as by Produce (records passed through ProduceTo's pinning keep it). Each call uses a
// fresh transactional client, so it fences any other producer using txnID. Every partition
// written gets a control record (the marker) after the data: a committed transaction of 2
// records on an empty partition moves its high watermark to 3.
func (c *Cluster) ProduceTxn(t testing.TB, txnID string, commit bool, recs ...*kgo.Record) []*kgo.Record {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	out, err := c.ProduceTxnContext(ctx, txnID, commit, recs...)
	if err != nil {
		t.Fatalf("kfaketest: ProduceTxn %q: %v", txnID, err)
	}
	return out
}

// ProduceTxnContext is ProduceTxn for programs. On a connected cluster it also waits until the
// transaction's markers are written (Kafka writes them after EndTxn returns), so the high
// watermarks count them, as on kfake. It returns the first produce error (the
// transaction is then aborted), or the error of beginning or ending the transaction.
func (c *Cluster) ProduceTxnContext(ctx context.Context, txnID string, commit bool, recs ...*kgo.Record) ([]*kgo.Record, error) {
	ctx, stop, err := c.bind(ctx)
	if err != nil {
		return nil, err
	}
	defer stop()
	cl, err := kgo.NewClient(append(c.ClientOpts(),
		kgo.RecordPartitioner(partitioner{}),
		kgo.TransactionalID(txnID),
	)...)
	if err != nil {
		return nil, err
	}
	defer cl.Close()
	if err := cl.BeginTransaction(); err != nil {
		return nil, fmt.Errorf("begin transaction: %w", err)
	}
	out, perr := produceSync(ctx, cl, recs)
	end, ectx := kgo.TransactionEndTry(commit), ctx
	if perr != nil { // abort, with a ctx of its own: ctx may be what ended (an open transaction holds read_committed readers back)
		var cancel context.CancelFunc
		end = kgo.TryAbort
		ectx, cancel = context.WithTimeout(context.WithoutCancel(ctx), WaitTimeout)
		defer cancel()
	}
	if err := cl.EndTransaction(ectx, end); err != nil {
		return nil, errors.Join(perr, fmt.Errorf("end transaction: %w", err))
	}
	if perr != nil {
		return nil, perr
	}
	if c.k == nil {
		if err := c.waitMarkers(ctx, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// waitMarkers waits until the transaction markers after recs are written: Kafka answers EndTxn
// once the coordinator has logged its decision and writes the markers afterwards, while kfake
// writes them first. Afterwards, as on kfake, the high watermark counts the marker and the last
// stable offset has passed the transaction (unless another transaction is still open there).
func (c *Cluster) waitMarkers(ctx context.Context, recs []*kgo.Record) error {
	last := map[string]map[int32]int64{} // per topic and partition, the last record's offset
	for _, r := range recs {
		if last[r.Topic] == nil {
			last[r.Topic] = map[int32]int64{}
		}
		last[r.Topic][r.Partition] = max(last[r.Topic][r.Partition], r.Offset)
	}
	for topic, parts := range last {
		for {
			infos, err := c.partitionInfos(ctx, topic)
			if err != nil {
				return fmt.Errorf("wait for the transaction markers: %w", err)
			}
			written := true
			for _, pi := range infos {
				if o, ok := parts[pi.partition]; ok && pi.hwm <= o+1 {
					written = false // the marker takes offset o+1 or later
				}
			}
			if written {
				break
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("wait for the transaction markers of %q: %w", topic, ctx.Err())
			case <-time.After(pollInterval):
			}
		}
	}
	return nil
}

// produceSync produces recs and waits for every one's outcome, then returns the first error, or
// returns at ctx's end: franz-go waits for a request already sent whatever its ctx (a HoldProduce
// holds it), so the wait selects on ctx itself. Only then may records still be in flight (franz-go
// sets their Partition and Offset when they finish): the caller must not touch them.
func produceSync(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) ([]*kgo.Record, error) {
	errs, err := produceEach(ctx, cl, recs)
	return produced(recs, errs, err)
}

// produceEach produces recs and waits for every record's outcome: errs[i] is recs[i]'s (nil once
// acknowledged), naming its topic. err is ctx's, if it ended first (records may still be in
// flight).
func produceEach(ctx context.Context, cl *kgo.Client, recs []*kgo.Record) ([]error, error) {
	errs := make([]error, len(recs)) // written by the promises, which may outlive a ctx that ends
	done := make(chan struct{}, len(recs))
	for i, r := range recs {
		cl.Produce(ctx, r, func(r *kgo.Record, err error) {
			if err != nil {
				errs[i] = fmt.Errorf("produce to %q: %w", r.Topic, err)
			}
			done <- struct{}{}
		})
	}
	for range recs {
		select {
		case <-done:
		case <-ctx.Done():
			return nil, fmt.Errorf("produce: %w (records may still be in flight)", context.Cause(ctx))
		}
	}
	return errs, nil
}

// produced returns recs, or the first error: err, else the first record's.
func produced(recs []*kgo.Record, errs []error, err error) ([]*kgo.Record, error) {
	if err != nil {
		return nil, err
	}
	for _, e := range errs {
		if e != nil {
			return nil, e
		}
	}
	return recs, nil
}

// pinKey marks, in Record.Context, a record ProduceTo pinned to Record.Partition.
type pinKey struct{}

// pin marks r; a record without a Context gets ctx as its parent, as kgo.Client.Produce would
// have given it, so ctx still cancels it.
func pin(ctx context.Context, r *kgo.Record, partition int32) {
	parent := r.Context
	if parent == nil {
		parent = ctx
	}
	r.Partition = partition
	r.Context = context.WithValue(parent, pinKey{}, true)
}

// partitioner sends keyed records where franz-go's default partitioner does and every other
// record (keyless, or pinned by ProduceTo) to its Record.Partition.
type partitioner struct{}

func (partitioner) ForTopic(topic string) kgo.TopicPartitioner {
	return &topicPartitioner{byKey: kgo.StickyKeyPartitioner(nil).ForTopic(topic)}
}

type topicPartitioner struct {
	byKey kgo.TopicPartitioner // only ever asked about keyed records, so its sticky state is unused
}

func (*topicPartitioner) RequiresConsistency(*kgo.Record) bool { return true }

func (p *topicPartitioner) Partition(r *kgo.Record, n int) int {
	if r.Key != nil && (r.Context == nil || r.Context.Value(pinKey{}) == nil) {
		return p.byKey.Partition(r, n)
	}
	return int(r.Partition)
}
