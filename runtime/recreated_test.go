package runtime_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

// recreate deletes topic and creates it again with one partition, then writes values to it with
// a client of its own (the Cluster's keeps the old topic ID, as every franz-go client does).
func recreate(t *testing.T, c *kfaketest.Cluster, topic string, values ...string) {
	t.Helper()
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	c.CreateTopic(t, topic, 1)
	for _, v := range values {
		require.NoError(t, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
}

// failedAlone waits for app to stop on its own (up to kfaketest.WaitTimeout; failing with msg) and
// returns why it failed, asserting it did.
func failedAlone(t *testing.T, app *runtime.App, msg string) error {
	t.Helper()
	select {
	case <-app.Done():
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal(msg)
	}
	state, reason := app.State()
	require.Equal(t, runtime.StateFailed, state)
	return reason
}

// A topic an Auto or Tracked subscription reads is deleted and created again while the App runs.
// franz-go keeps the old topic ID and never reads the new topic with that client, and no fetch
// says so: the App used to stay Running and read nothing more, Tracked without a word (Auto
// logged a refused autocommit every interval). It fails with ErrTopicRecreated now; its shutdown
// is clean (the old topic's offsets have nowhere to go), and the App started again reads the new
// topic's record once. The user's own kgo logger still gets franz-go's lines, at its level.
func TestATopicCreatedAgainFailsTheApp(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("x", 1))
			c.ProduceValues(t, "x", 0, values("old", 5)...)
			var s seen
			var kgoLog lockedBuffer
			sub := runtime.Topic("x").Commit(mode).Config(kgo.MetadataMaxAge(100 * time.Millisecond))
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"),
				runtime.ClientOpts(kgo.WithLogger(kgo.BasicLogger(&kgoLog, kgo.LogLevelInfo, nil))))...)
			runtime.Handle(app, sub, s.handler())
			startNoCleanup(t, app)
			c.WaitCommitted(t, "g", "x", map[int32]int64{0: 5})

			recreate(t, c, "x", "new")
			reason := failedAlone(t, app, "the App still runs, reading nothing of the new topic")
			require.ErrorIs(t, reason, runtime.ErrTopicRecreated)
			require.EqualError(t, reason, `tidemark: a topic was deleted and created again: Topic("x"): `+
				`topic "x", group "g": restart the App to read the new topic`)
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			require.NoError(t, app.Shutdown(ctx), "the old topic's offsets have nowhere to go")
			require.Equal(t, values("old", 5), s.values())
			require.Empty(t, c.Committed(t, "g", "x"), "the old topic's offsets went with it")
			log := kgoLog.String()
			require.Contains(t, log, "[INFO] beginning to manage the group lifecycle", "the user's kgo logger at Info")
			require.Contains(t, log, "[WARN] metadata has a new ID for a topic we already hold")
			require.NotContains(t, log, "[DEBUG]", "nothing under the user's level")

			again := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
			var s2 seen
			runtime.Handle(again, sub, s2.handler())
			start(t, again)
			c.WaitCommitted(t, "g", "x", map[int32]int64{0: 1})
			require.Equal(t, []string{"new"}, s2.values())
		})
	}
}

// A Transactional subscription makes its session again (a new client) when a topic it reads is
// deleted and created again, and reads the new topic without a restart: here a topic of its
// pattern it had read nothing of, so no window's commit fails for it (the session used to go on
// without reading the new topic).
func TestATransactionalSubscriptionReadsATopicCreatedAgain(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("ev-a", 1), kfaketest.Topic("ev-b", 1))
	c.ProduceValues(t, "ev-a", 0, values("a", 5)...)
	var s seen
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Pattern("^ev-").Commit(runtime.Transactional("tx")).
		Config(kgo.MetadataMaxAge(100*time.Millisecond)), s.handler(), runtime.RetryToSource())
	start(t, app)
	c.WaitCommitted(t, "g", "ev-a", map[int32]int64{0: 5})

	recreate(t, c, "ev-b", "new")
	c.WaitCommitted(t, "g", "ev-b", map[int32]int64{0: 1})
	state, _ := app.State()
	require.Equal(t, runtime.StateRunning, state)
	require.Equal(t, append(values("a", 5), "new"), s.values())
	require.Equal(t, map[int32]int64{0: 5}, c.Committed(t, "g", "ev-a"))
}

// A topic only written to is re-created: a Transactional subscription's reply topic, whose
// windows aborted after every attempt (franz-go fails each record for it), without end, makes the
// session again and writes the later replies to the new topic; the App's producer (a Tracked
// subscription's replies), which would fail every record for it, fails the App with
// ErrTopicRecreated, and nothing is committed past the replies not written.
func TestAReplyTopicCreatedAgain(t *testing.T) {
	echo := runtime.JSONReply(func(_ context.Context, v int) (int, error) { return v, nil })
	t.Run("Transactional", func(t *testing.T) {
		c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
		app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
		runtime.Handle(app, runtime.Topic("in").Commit(runtime.Transactional("tx")).
			Config(kgo.MetadataMaxAge(100*time.Millisecond)), echo, runtime.Reply("out"))
		start(t, app)
		c.ProduceValues(t, "in", 0, "1", "2")
		c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})

		recreate(t, c, "out")
		c.ProduceValues(t, "in", 0, "3", "4")
		c.WaitCommitted(t, "g", "in", map[int32]int64{0: 4})
		var got []string
		for _, r := range c.ReadAll(t, "out", true) {
			got = append(got, string(r.Value))
		}
		require.Equal(t, []string{"3", "4"}, got, "the new topic has the later replies, once each")
		state, _ := app.State()
		require.Equal(t, runtime.StateRunning, state)
	})
	t.Run("Tracked", func(t *testing.T) {
		c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
		app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.ClientOpts(kgo.MetadataMaxAge(100*time.Millisecond)))...)
		runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked), echo, runtime.Reply("out"))
		startNoCleanup(t, app)
		c.ProduceValues(t, "in", 0, "1", "2")
		c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})

		recreate(t, c, "out")
		reason := failedAlone(t, app, "the App still runs, its producer failing every reply")
		require.EqualError(t, reason, `tidemark: a topic was deleted and created again: the App's producer: topic "out": `+
			`restart the App to write to the new topic`)
		ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
		defer cancel()
		require.NoError(t, app.Shutdown(ctx))
		require.Equal(t, map[int32]int64{0: 2}, c.Committed(t, "g", "in"))
	})
}

// Manual partitions read a topic deleted and created again: the App fails with
// ErrTopicRecreated as a group subscription's does (helper-106: its client had no watch, and it
// stayed Running, reading nothing), and with a group, nothing of the old topic's positions is
// committed onto the new topic (helper-106: kadm commits by name, and the final commit put offset
// 5 on the new topic, so the restarted App skipped its first 5 records). The App started again
// reads the new topic whole, once.
func TestAManualSubscriptionsTopicCreatedAgain(t *testing.T) {
	for _, tc := range []struct {
		name string
		sub  runtime.Subscription
	}{
		{"Auto, group", runtime.Partitions("x", 0).Group("gm")},
		{"Tracked, group", runtime.Partitions("x", 0).Group("gm").Commit(runtime.Tracked)},
		{"Auto, no group", runtime.Partitions("x", 0)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("x", 1))
			c.ProduceValues(t, "x", 0, values("old", 5)...)
			var s seen
			sub := tc.sub.Config(kgo.MetadataMaxAge(100 * time.Millisecond))
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, sub, s.handler(), runtime.RetryToSource())
			startNoCleanup(t, app)
			eventually(t, func() bool { return s.len() == 5 }, "the old records not handled")
			grouped := strings.Contains(tc.name, ", group")
			if grouped {
				c.WaitCommitted(t, "gm", "x", map[int32]int64{0: 5})
			}

			recreate(t, c, "x", values("new", 10)...)
			reason := failedAlone(t, app, "the App still runs, reading nothing of the new topic")
			require.EqualError(t, reason, `tidemark: a topic was deleted and created again: Partitions("x", [0]): topic "x", `+
				fmt.Sprintf("group %q: restart the App to read the new topic", map[bool]string{true: "gm"}[grouped]))
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			require.NoError(t, app.Shutdown(ctx))
			require.Equal(t, values("old", 5), s.values())
			if !grouped {
				return
			}
			require.Empty(t, c.Committed(t, "gm", "x"), "nothing committed onto the new topic")
			again := runtime.New(appOpts(c)...)
			var s2 seen
			runtime.Handle(again, sub, s2.handler(), runtime.RetryToSource())
			start(t, again)
			c.WaitCommitted(t, "gm", "x", map[int32]int64{0: 10})
			require.Equal(t, values("new", 10), s2.values())
		})
	}
}

// A topic manual partitions read with a group is deleted (not created again): its positions have
// nowhere to go, and Shutdown is clean, as for a group subscription (helper-106: the final commit
// failed with UNKNOWN_TOPIC_OR_PARTITION). The other subscription's topic is committed exactly.
func TestAManualSubscriptionsTopicDeletedDoesNotFailTheShutdown(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 1), kfaketest.Topic("b", 1))
	c.ProduceValues(t, "a", 0, values("a", 3)...)
	c.ProduceValues(t, "b", 0, values("b", 3)...)
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Partitions("a", 0).Group("ga").Commit(runtime.Tracked), s.handler(), runtime.RetryToSource())
	runtime.Handle(app, runtime.Partitions("b", 0).Group("gb").Commit(runtime.Tracked), s.handler(), runtime.RetryToSource())
	startNoCleanup(t, app)
	c.WaitCommitted(t, "ga", "a", map[int32]int64{0: 3})

	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, "a")
	require.NoError(t, err)
	require.NoError(t, resp.Error())
	c.ProduceValues(t, "b", 0, "late")
	eventually(t, func() bool { return s.len() == 7 }, "the late record not handled")
	require.NoError(t, app.Shutdown(ctx), "the deleted topic's positions have nowhere to go")
	require.Equal(t, map[int32]int64{0: 4}, c.Committed(t, "gb", "b"))
}
