package runtime_test

import (
	"context"
	"errors"
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
	c.ProduceValues(t, "in", 2, "once", "always")
	app := runtime.New(appOpts(c, runtime.ProducerOpts(kgo.RecordPartitioner(kgo.ManualPartitioner())))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if v := string(d.Record().Value); v == "always" || d.Attempt() == 1 {
				return errors.New(v)
			}
			return nil
		}), runtime.MaxAttempts(2), runtime.DeadLetter("dlq"), fastBackoff)
	start(t, app)
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
