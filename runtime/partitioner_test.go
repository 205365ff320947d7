package runtime_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// partitionsOfValues maps each record value read from topic to its partition.
func partitionsOfValues(t *testing.T, c *kfaketest.Cluster, topic string) map[string]int32 {
	t.Helper()
	got := map[string]int32{}
	for _, r := range c.ReadAll(t, topic, true) {
		got[string(r.Value)] = r.Partition
	}
	return got
}

// startCopying produces "once" and "always" to partition 2 of "in" and starts a Tracked App with
// p as its producer's partitioner, MaxAttempts(2) and DeadLetter("dlq"): "once" fails once (a
// retry copy back to partition 2), "always" fails twice (a copy, then a dead letter).
func startCopying(t *testing.T, c *kfaketest.Cluster, p kgo.Partitioner) *runtime.App {
	t.Helper()
	c.ProduceValues(t, "in", 2, "once", "always")
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(p)))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if v := string(d.Record().Value); v == "always" || d.Attempt() == 1 {
				return errors.New(v)
			}
			return nil
		}), runtime.MaxAttempts(2), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
	return app
}

// A kgo.RecordPartitioner in ProducerOpts partitions what Publish writes; Tidemark's own
// partitioner only pins retry copies to their source partition (docs/operations.md).
func TestPublishUsesTheProducerOptsPartitioner(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("out", 4))
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))...)
	t.Cleanup(func() { stop(t, app) })
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Key: []byte("k"), Value: []byte("to-3"), Partition: 3}))
	require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Key: []byte("k"), Value: []byte("to-1"), Partition: 1}))
	require.Equal(t, map[string]int32{"to-3": 3, "to-1": 1}, partitionsOfValues(t, c, "out"))
}

// Under a user's ManualPartitioner, a retry copy still goes back to its source partition (the
// runtime pins it), and a dead-letter record, which the runtime does not pin, goes where the user's
// partitioner puts it: partition 0, the Partition a new record has (DESIGN §3.3).
func TestRetryCopiesArePinnedUnderTheUsersPartitioner(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 3), kfaketest.Topic("dlq", 2))
	app := startCopying(t, c, kgo.ManualPartitioner())
	// originals at 0 and 1, copies at 2 and 3: all on partition 2
	c.WaitCommitted(t, "g", "in", map[int32]int64{2: 4})
	stop(t, app)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 4}, c.HighWatermarks(t, "in"))
	require.Equal(t, map[string]int32{"always": 0}, partitionsOfValues(t, c, "dlq"))
}

// A Transactional handler's publish goes through the session's client, which takes the same
// partitioner from ProducerOpts.
func TestTransactionalPublishUsesTheProducerOptsPartitioner(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 4))
	c.ProduceValues(t, "in", 0, "a", "b")
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-part")),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			return app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("out-" + string(d.Record().Value)), Partition: 3})
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", c.HighWatermarks(t, "in"))
	stop(t, app)
	require.Equal(t, map[string]int32{"out-a": 3, "out-b": 3}, partitionsOfValues(t, c, "out"))
}

// franz-go's partitioners that choose by buffered records (UniformBytesPartitioner, its default,
// and LeastBackupPartitioner) panic in Partition: franz-go calls their PartitionByBackup, which
// Tidemark's partitioner passes on. Publishes land, retry copies go back to their source partition
// and dead letters are written.
func TestBackupPartitionersPublishAndPinCopies(t *testing.T) {
	for name, p := range map[string]kgo.Partitioner{
		"UniformBytes": kgo.UniformBytesPartitioner(1024, false, true, nil),
		"LeastBackup":  kgo.LeastBackupPartitioner(),
	} {
		t.Run(name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 3), kfaketest.Topic("out", 2), kfaketest.Topic("dlq", 2))
			app := startCopying(t, c, p)
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("keyless")}))
			require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Key: []byte("k"), Value: []byte("keyed")}))
			c.WaitCommitted(t, "g", "in", map[int32]int64{2: 4})
			stop(t, app)
			require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 4}, c.HighWatermarks(t, "in"), "both copies on partition 2")
			require.Len(t, partitionsOfValues(t, c, "out"), 2)
			require.Contains(t, partitionsOfValues(t, c, "dlq"), "always")
		})
	}
}

// countingPartitioner sends the i-th record of a topic to partition i mod n and counts the calls;
// it has no OnNewBatch, so franz-go asks it once per record.
type countingPartitioner struct{ calls atomic.Int32 }

func (p *countingPartitioner) ForTopic(string) kgo.TopicPartitioner { return &countingTopic{p: p} }

type countingTopic struct {
	p *countingPartitioner
	i int
}

func (*countingTopic) RequiresConsistency(*kgo.Record) bool { return false }
func (t *countingTopic) Partition(_ *kgo.Record, n int) int {
	t.p.calls.Add(1)
	t.i++
	return (t.i - 1) % n
}

// Tidemark's partitioner implements franz-go's optional partitioner interfaces only where the
// user's does: a partitioner without OnNewBatch is asked once per record, as franz-go alone asks
// it (with OnNewBatch it is asked again for each record that opens a batch, and a round robin
// skipped every other partition). Six keyless publishes to two partitions.
func TestAUsersPartitionerIsAskedOncePerRecord(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("out", 2), kfaketest.Topic("raw", 2))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	values := []string{"v0", "v1", "v2", "v3", "v4", "v5"}

	raw, err := kgo.NewClient(kgo.SeedBrokers(c.Addrs()...), kgo.RecordPartitioner(kgo.RoundRobinPartitioner()))
	require.NoError(t, err)
	defer raw.Close()
	for _, v := range values {
		require.NoError(t, raw.ProduceSync(ctx, &kgo.Record{Topic: "raw", Value: []byte(v)}).FirstErr())
	}
	rr := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(kgo.RoundRobinPartitioner())))...)
	t.Cleanup(func() { stop(t, rr) })
	for _, v := range values {
		require.NoError(t, rr.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte(v)}))
	}
	require.Equal(t, partitionsOfValues(t, c, "raw"), partitionsOfValues(t, c, "out"), "RoundRobinPartitioner, franz-go alone and through Publish")
	require.Equal(t, map[string]int32{"v0": 0, "v1": 1, "v2": 0, "v3": 1, "v4": 0, "v5": 1}, partitionsOfValues(t, c, "out"))

	c.CreateTopic(t, "counted", 2)
	var p countingPartitioner
	counted := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(&p)))...)
	t.Cleanup(func() { stop(t, counted) })
	for _, v := range values {
		require.NoError(t, counted.Publish(ctx, &kgo.Record{Topic: "counted", Value: []byte(v)}))
	}
	require.Equal(t, int32(len(values)), p.calls.Load(), "Partition calls for %d records", len(values))
	require.Equal(t, map[string]int32{"v0": 0, "v1": 1, "v2": 0, "v3": 1, "v4": 0, "v5": 1}, partitionsOfValues(t, c, "counted"))
}

// newClients counts the kgo clients made with it in their options (a kgo.HookNewClient).
type newClients struct{ n atomic.Int32 }

func (h *newClients) OnNewClient(*kgo.Client) { h.n.Add(1) }

// The user's producer options are read once, at Start, from a client made and closed unused: a
// user's hooks see it then, never while the App's clients run. The first Publish after Start
// makes exactly one client, the producer (a metrics hook counting clients by their close would
// otherwise see one of them go).
func TestTheProducerOptionsAreProbedOnlyAtStart(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	var h newClients
	app := runtime.New(appOpts(c, runtime.ClientOpts(kgo.WithHooks(&h)),
		runtime.ProducerOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Transactional("tx-probe")), ack)
	start(t, app)
	atStart := h.n.Load()
	require.Equal(t, int32(4), atStart, "the producer's probe, ClientOpts's probe (readOwned), the Transactional session's probe, the session")
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "out", Value: []byte("v")}))
	require.Equal(t, atStart+1, h.n.Load(), "the first Publish makes the producer, and only it")
}
