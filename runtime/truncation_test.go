package runtime_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A log truncation (a new leader whose log ends below what was fetched: an unclean leader
// election) rewinds franz-go to the new end offset, 6 here, while 3 is still in its handler and 4
// and 5 are queued behind it. Nothing delivers 3, 4 and 5 again, so they stay in flight: the
// committed offset stays at 3, and a restart handles 3 onwards (helper-87: the tracker's rewind
// dropped them and the group committed 6, and a crash then lost 3, 4 and 5).
func TestTrackedTruncationBelowTheFetchedKeepsEarlierRecordsInFlight(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var vals []string
	for i := range 20 {
		vals = append(vals, fmt.Sprint(i))
	}
	c.ProduceValues(t, "in", 0, vals...)

	started := make(chan struct{})
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 3 {
				close(started) // one lane: 3 is handled once, before Shutdown cancels it
				<-ctx.Done()
				return ctx.Err()
			}
			return nil
		}))
	startNoCleanup(t, app)
	<-started
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})

	k := c.Kfake() // the leader changed; its log diverges at 6
	k.Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.Fetch}, Topic: "in", Err: kerr.FencedLeaderEpoch})
	k.ControlKey(int16(kmsg.OffsetForLeaderEpoch), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.OffsetForLeaderEpochRequest)
		resp := req.ResponseKind().(*kmsg.OffsetForLeaderEpochResponse)
		for _, rt := range req.Topics {
			st := kmsg.NewOffsetForLeaderEpochResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetForLeaderEpochResponseTopicPartition()
				sp.Partition, sp.LeaderEpoch, sp.EndOffset = rp.Partition, rp.LeaderEpoch, 6
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	delivered := func() (n int) {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, e := range obs.delivered {
			n += e.Records
		}
		return n
	}
	eventually(t, func() bool { return delivered() == 20+14 }, "6..19 not fetched again (delivered %d)", delivered())

	// Shutdown cancels 3 at its drain bound and commits what finished: the watermark, 3.
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	require.Error(t, app.Shutdown(ctx))
	require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "g", "in"))
	require.Equal(t, []int64{0, 1, 2}, obs.settledOffsets()[:3])

	var s seen
	app2 := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app2, runtime.Topic("in").Commit(runtime.Tracked), s.handler())
	start(t, app2)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 20})
	require.Equal(t, vals[3:], s.values())
}
