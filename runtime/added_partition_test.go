package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// failOnceThenAdd starts an App whose Tracked handler on "in" (one partition) fails every first
// attempt under MaxAttempts(3), waits until the copy of a first record is committed (so the App's
// producer has loaded "in"'s metadata, which it refreshes only every 5 minutes by default), then
// adds n partitions to "in". got records every delivery.
func failOnceThenAdd(t *testing.T, c *kfaketest.Cluster, n int, got *calls, opts ...runtime.HandleOption) *runtime.App {
	t.Helper()
	c.ProduceValues(t, "in", 0, "warm")
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked).Config(kgo.MetadataMaxAge(200*time.Millisecond)),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			got.add(d)
			if d.Attempt() == 1 {
				return errors.New("once")
			}
			return nil
		}), append([]runtime.HandleOption{runtime.MaxAttempts(3), fastBackoff}, opts...)...)
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2}) // "warm" and its copy

	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreatePartitions(context.Background(), n, "in")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	return app
}

// A retry copy goes back to a partition added while the App runs: the App's producer learns the
// partition and produces the copy, without handling the record again in place (helper-115: every
// copy to the added partition failed with "invalid record partitioning choice" and its record
// spent its attempts in place).
func TestARetryCopyReachesAPartitionAddedWhileRunning(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var got calls
	app := failOnceThenAdd(t, c, 1, &got)
	c.ProduceValues(t, "in", 1, "new")
	eventually(t, func() bool { return got.len() == 4 }, "new's second delivery")
	recs, attempts, _ := got.snapshot()
	require.Equal(t, []int{1, 2, 1, 2}, attempts)
	second := recs[3]
	require.Equal(t, "new", string(second.Value))
	require.Equal(t, int32(1), second.Partition, "the copy is on the added partition")
	require.Equal(t, int64(1), second.Offset, "a copy, not the original handled again in place")
	require.Equal(t, []string{"1"}, hv(second, retry.CountHeader))
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2, 1: 2})
	stop(t, app)
	require.Equal(t, map[int32]int64{0: 2, 1: 2}, c.HighWatermarks(t, "in"))
}

// Copies to several added partitions fail together against the producer's old partition count:
// each of them is produced again once the producer knows its partition, whichever failure's
// refresh taught it. Every second delivery is a copy (retry count 1, on its record's partition,
// after the originals), none the original handled again in place (helper-117: the copies whose
// partition a refresh for another had taught the producer were taken for other failures).
func TestRetryCopiesReachPartitionsAddedTogether(t *testing.T) {
	const added, each = 8, 4
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var got calls
	app := failOnceThenAdd(t, c, added, &got, runtime.Unordered, runtime.Workers(2*added))
	want := map[int32]int64{0: 2}
	for p := int32(1); p <= added; p++ {
		c.ProduceValues(t, "in", p, values(fmt.Sprintf("p%d-", p), each)...)
		want[p] = 2 * each
	}
	eventually(t, func() bool { return got.len() == 2+2*added*each }, "every record's second delivery")
	recs, attempts, _ := got.snapshot()
	for i, r := range recs[2:] {
		if attempts[i+2] == 2 {
			require.Equal(t, []string{"1"}, hv(r, retry.CountHeader), "%s@%d/%d: a copy", r.Value, r.Partition, r.Offset)
			require.GreaterOrEqual(t, r.Offset, int64(each), "%s: after the originals", r.Value)
		}
	}
	c.WaitCommitted(t, "g", "in", want)
	stop(t, app)
	require.Equal(t, want, c.HighWatermarks(t, "in"))
}
