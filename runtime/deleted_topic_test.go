package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A topic a Pattern subscription reads is deleted while it holds marks not yet committed. Its
// offsets have nowhere to go, so Shutdown's final commit, which fails for them
// (UNKNOWN_TOPIC_ID), logs them and returns nil: the shutdown is clean. The partitions of the
// topic that remains are committed exactly, and each is reported with a Committed event although
// the commit failed for the deleted topic's. Before: Shutdown returned the error, and no event was
// sent for any partition of that commit (the Observer said 150 where the group had 160)
// (helper-69).
func TestADeletedPatternTopicDoesNotFailTheShutdown(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Tracked, runtime.Auto} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("ev-a", 1), kfaketest.Topic("ev-b", 1))
			c.ProduceValues(t, "ev-a", 0, values("a", 150)...)
			c.ProduceValues(t, "ev-b", 0, values("b", 50)...)
			obs := &observer{}
			var handled atomic.Int64
			gate := make(chan struct{})
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Pattern("^ev-").Commit(mode).Config(kgo.MetadataMaxAge(100*time.Millisecond)),
				runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
					if r := d.Record(); r.Topic == "ev-b" && r.Offset == 10 {
						if err := await(ctx, gate); err != nil { // ev-b's records from 10 on finish after the deletion
							return err
						}
					}
					handled.Add(1)
					return nil
				}), runtime.RetryToSource(), runtime.Workers(2))
			startNoCleanup(t, app)
			c.WaitCommitted(t, "g", "ev-a", map[int32]int64{0: 150})
			c.WaitCommitted(t, "g", "ev-b", map[int32]int64{0: 10})

			cl, err := kgo.NewClient(c.ClientOpts()...)
			require.NoError(t, err)
			defer cl.Close()
			resp, err := kadm.NewClient(cl).DeleteTopics(context.Background(), "ev-b")
			require.NoError(t, err)
			require.NoError(t, resp.Error())
			close(gate)
			eventually(t, func() bool { return handled.Load() == 200 }, "200 records not handled")
			c.ProduceValues(t, "ev-a", 0, values("late", 10)...)
			eventually(t, func() bool { return handled.Load() == 210 }, "the 10 late records not handled")

			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			require.NoError(t, app.Shutdown(ctx), "a deleted topic's offsets have nowhere to go")
			require.Equal(t, map[int32]int64{0: 160}, c.Committed(t, "g", "ev-a"))
			require.Equal(t, int64(160), obs.lastCommitted("ev-a", 0), "the Observer saw the final commit")
		})
	}
}

// A topic a Pattern subscription reads is deleted and created again under its name. franz-go keeps
// the old topic ID, so the App fails with ErrTopicRecreated (recreated_test.go), and the final
// commit of its shutdown fails for the old topic's marks (UNKNOWN_TOPIC_ID): the topic the broker
// knows by that name has another ID, the old one is gone, and the shutdown is clean, the other
// topic's offsets committed. Before, the shutdown failed with the commit's error (helper-101).
func TestAPatternTopicCreatedAgainDoesNotFailTheShutdown(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("ev-a", 1), kfaketest.Topic("ev-b", 1))
	c.ProduceValues(t, "ev-a", 0, values("a", 5)...)
	c.ProduceValues(t, "ev-b", 0, values("b", 5)...)
	var handled atomic.Int64
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern("^ev-").Commit(runtime.Tracked).Config(kgo.MetadataMaxAge(100*time.Millisecond)),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { handled.Add(1); return nil }),
		runtime.RetryToSource())
	startNoCleanup(t, app)
	eventually(t, func() bool { return handled.Load() == 10 }, "10 records not handled")

	recreate(t, c, "ev-b")
	reason := failedAlone(t, app, "the App did not stop")
	require.EqualError(t, reason, `tidemark: a topic was deleted and created again: Pattern("^ev-"): `+
		`topic "ev-b", group "g": restart the App to read the new topic`, "the reason is the re-creation alone")
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Shutdown(ctx), "the old topic's offsets have nowhere to go")
	require.Equal(t, map[int32]int64{0: 5}, c.Committed(t, "g", "ev-a"))
	require.Empty(t, c.Committed(t, "g", "ev-b"), "the topic created again has no committed offset")
}
