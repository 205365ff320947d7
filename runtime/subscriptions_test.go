package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Manual partitions have no group membership: they start from the named group's committed offsets
// and commit into it with kadm (DESIGN §3.10). A group, topics and partitions in ClientOpts, which
// group subscriptions override, are overridden here too (helpers 128, 130: with a group the
// subscription read nothing; with topics or partitions it read them and committed them into its
// group).
func TestManualPartitionsReadAndCommitTheirGroup(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 3), kfaketest.Topic("other", 1))
			c.ProduceValues(t, "in", 0, "a0", "a1", "a2")
			c.ProduceValues(t, "in", 1, "b0", "b1")
			c.ProduceValues(t, "in", 2, "c0") // not subscribed
			c.ProduceValues(t, "other", 0, "o0")
			sub := runtime.Partitions("in", 0, 1).Group("manual").Commit(mode)

			var s seen
			app := runtime.New(appOpts(c, runtime.DefaultGroup("unused"),
				runtime.ClientOpts(kgo.ConsumerGroup("zzz"), kgo.ConsumeTopics("other"),
					kgo.ConsumePartitions(map[string]map[int32]kgo.Offset{"other": {0: kgo.NewOffset().AtStart()}})))...)
			runtime.Handle(app, sub, runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
				s.add(string(d.Record().Value), d.Attempt())
				require.Equal(t, "manual", d.Group())
				return nil
			}), runtime.RetryToSource())
			start(t, app)
			eventually(t, func() bool { return s.len() == 5 }, "5 records not handled")
			stop(t, app)
			require.Equal(t, map[int32]int64{0: 3, 1: 2}, c.Committed(t, "manual", "in"))
			require.Empty(t, c.Committed(t, "manual", "other"))
			require.Empty(t, c.Committed(t, "zzz", "in"))
			got := s.values()
			sort.Strings(got)
			require.Equal(t, []string{"a0", "a1", "a2", "b0", "b1"}, got)

			c.ProduceValues(t, "in", 1, "b2")
			var s2 seen
			app2 := runtime.New(appOpts(c)...)
			runtime.Handle(app2, sub, s2.handler(), runtime.RetryToSource())
			start(t, app2)
			eventually(t, func() bool { return s2.len() == 1 }, "the new record not handled")
			stop(t, app2)
			require.Equal(t, []string{"b2"}, s2.values(), "a restart resumes from the committed offsets")
			require.Equal(t, map[int32]int64{0: 3, 1: 3}, c.Committed(t, "manual", "in"))
		})
	}
}

// startManualSeen starts an App with one Partitions("in", 0) subscription in group "manual" and
// mode, whose handler records what it sees. The test shuts the App down itself.
func startManualSeen(t *testing.T, c *kfaketest.Cluster, mode runtime.CommitMode) (*runtime.App, *seen) {
	t.Helper()
	s := &seen{}
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Partitions("in", 0).Group("manual").Commit(mode),
		s.handler(), runtime.RetryToSource())
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	return app, s
}

// A manual subscription's failed final commit is Shutdown's error, as a group subscription's is
// (operations.md, shutdown step 4): nothing committed, nothing reported as done. franz-go retried
// the coordinator's answer until the commit's 5 s bound: the error is ErrCommitTimeout, with that
// last answer (helper-77).
func TestManualPartitionsShutdownReportsAFailedFinalCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	fault := c.FailCommit("manual", -1, kerr.CoordinatorNotAvailable) // every commit, periodic ones too
	app, s := startManualSeen(t, c, runtime.Tracked)
	eventually(t, func() bool { return s.len() == 3 }, "3 records not handled")
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := app.Shutdown(ctx)
	require.ErrorIs(t, err, kerr.CoordinatorNotAvailable)
	require.ErrorIs(t, err, runtime.ErrCommitTimeout)
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, `tidemark: Partitions("in", [0]): final commit: tidemark: commit of manual partitions to group "manual": tidemark: commit not acknowledged within 5 s (last answer: COORDINATOR_NOT_AVAILABLE`)
	require.Positive(t, fault.Hits())
	require.Empty(t, c.Committed(t, "manual", "in"))
}

// Shutdown stops the committer before its final commit: a periodic commit of a manual Auto
// subscription, in flight when Shutdown begins (held here until then, and failed), must not take
// the positions the final commit needs. The final commit commits them (before, it found nothing
// pending, Shutdown returned nil and the offsets stayed uncommitted).
func TestManualAutoFinalCommitIsNotTakenByAPeriodicOne(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	app, s := startManualSeen(t, c, runtime.Auto)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	caught, held := make(chan struct{}), make(chan struct{})
	var release sync.Once
	defer release.Do(func() { close(held) })
	first := true // the control runs in kfake's one goroutine
	c.Kfake().ControlKey(int16(kmsg.OffsetCommit), func(kmsg.Request) (kmsg.Response, error, bool) {
		if !first {
			c.Kfake().DropControl()
			return nil, nil, false
		}
		first = false
		c.Kfake().KeepControl()
		close(caught)
		c.Kfake().SleepControl(func() { <-held }) // the periodic commit stays in flight
		return nil, errors.New("the periodic commit fails"), true
	})
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	eventually(t, func() bool { return s.len() == 3 }, "3 records not handled")
	waitClosed(t, caught, "no periodic commit") // the committer's tick (every second) sent offset 3
	shut := make(chan error, 1)
	go func() { shut <- app.Shutdown(ctx) }()
	eventually(t, func() bool { st, _ := app.State(); return st == runtime.StateShuttingDown }, "Shutdown never began")
	release.Do(func() { close(held) })
	require.NoError(t, <-shut)
	require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "manual", "in"))
}

// A pattern subscription is ready once metadata has loaded even if nothing matches, and picks up a
// matching topic created later (DESIGN §3.10).
func TestPatternSubscriptionPicksUpNewTopics(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("other", 1))
	var s seen
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	// New topics are found when metadata refreshes: every MetadataMaxAge (franz-go's default 5m).
	sub := runtime.Pattern("^ev-").Commit(runtime.Tracked).Config(kgo.MetadataMaxAge(100 * time.Millisecond))
	runtime.Handle(app, sub,
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			s.add(d.Record().Topic+":"+string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.RetryToSource())
	start(t, app) // returns although no topic matches yet
	state, _ := app.State()
	require.Equal(t, runtime.StateRunning, state)

	c.CreateTopic(t, "ev-a", 1)
	c.ProduceValues(t, "other", 0, "ignored")
	c.ProduceValues(t, "ev-a", 0, "1", "2")
	c.WaitCommitted(t, "g", "ev-a", map[int32]int64{0: 2})
	require.Equal(t, []string{"ev-a:1", "ev-a:2"}, s.values())
}

// Two subscriptions of one App run side by side, each with its own group, client and mode.
func TestTwoSubscriptionsRunSideBySide(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	for p := range int32(2) {
		c.ProduceValues(t, "in", p, fmt.Sprint(p, "-0"), fmt.Sprint(p, "-1"))
	}
	var a, b seen
	app := runtime.New(appOpts(c, runtime.InstanceID("pod-0"))...)
	runtime.Handle(app, runtime.Topic("in").Group("ga").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error { a.add(string(d.Record().Value), 0); return nil }))
	runtime.Handle(app, runtime.Topic("in").Group("gb"),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error { b.add(string(d.Record().Value), 0); return nil }))
	start(t, app)
	want := map[int32]int64{0: 2, 1: 2}
	c.WaitCommitted(t, "ga", "in", want)
	c.WaitCommitted(t, "gb", "in", want)
	require.Equal(t, 4, a.len())
	require.Equal(t, 4, b.len())
	for _, cm := range c.CommitLog().All() {
		require.Contains(t, []string{"pod-0-0", "pod-0-1"}, cm.InstanceID, "static member ids per subscription")
	}
}

// Run returns nil after its ctx ends, once everything has stopped, and the App reports Stopped.
func TestRunStopsCleanlyWhenItsContextEnds(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	handled := make(chan struct{})
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { close(handled); return nil }))
	ctx, cancel := context.WithCancel(context.Background())
	errc := make(chan error, 1)
	go func() { errc <- app.Run(ctx) }()
	select {
	case <-handled:
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("record not handled")
	}
	cancel()
	select {
	case err := <-errc:
		require.NoError(t, err)
	case <-time.After(15 * time.Second):
		t.Fatal("Run did not return")
	}
	state, reason := app.State()
	require.Equal(t, runtime.StateStopped, state)
	require.NoError(t, reason)
	require.Equal(t, map[int32]int64{0: 1}, c.Committed(t, "g", "in"))
	<-app.Done()
}
