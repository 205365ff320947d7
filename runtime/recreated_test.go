package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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
// without reading the new topic). So too with a kgo logger of the user's in ProducerOpts, which a
// Transactional session takes after ClientOpts (helper-107: it replaced the runtime's watch), and
// which gets franz-go's warning all the same.
func TestATransactionalSubscriptionReadsATopicCreatedAgain(t *testing.T) {
	for _, userLogger := range []bool{false, true} {
		t.Run(fmt.Sprintf("user logger %v", userLogger), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("ev-a", 1), kfaketest.Topic("ev-b", 1))
			c.ProduceValues(t, "ev-a", 0, values("a", 5)...)
			var s seen
			var kgoLog lockedBuffer
			opts := []runtime.Option{runtime.DefaultGroup("g")}
			if userLogger {
				opts = append(opts, runtime.ProducerOpts(kgo.WithLogger(kgo.BasicLogger(&kgoLog, kgo.LogLevelWarn, nil))))
			}
			app := runtime.New(appOpts(c, opts...)...)
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
			if userLogger {
				require.Contains(t, kgoLog.String(), "[WARN] metadata has a new ID for a topic we already hold")
			}
		})
	}
}

// A topic only written to is re-created. A Transactional subscription's reply topic, whose
// windows aborted after every attempt (franz-go fails each record for it), without end, makes the
// session again and writes the later replies to the new topic. The App's producer (a Tracked
// subscription's replies, a Publish) forgets the topic and writes the later records to the new
// one (helper-107: it failed the App, where franz-go's purge is all it takes; before that, it
// failed every later record for the topic). Each reply is written once.
func TestAReplyTopicCreatedAgain(t *testing.T) {
	echo := runtime.JSONReply(func(_ context.Context, v int) (int, error) { return v, nil })
	for _, mode := range []runtime.CommitMode{runtime.Transactional("tx"), runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("audit", 1))
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.ClientOpts(kgo.MetadataMaxAge(100*time.Millisecond)))...)
			runtime.Handle(app, runtime.Topic("in").Commit(mode), echo, runtime.Reply("out"))
			start(t, app)
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			require.NoError(t, app.Publish(ctx, &kgo.Record{Topic: "audit", Value: []byte("a1")}))
			c.ProduceValues(t, "in", 0, "1", "2")
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})

			recreate(t, c, "out")
			recreate(t, c, "audit")
			c.ProduceValues(t, "in", 0, "3", "4")
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 4})
			require.Equal(t, []string{"3", "4"}, readValues(t, c, "out"), "the new topic has the later replies, once each")
			eventually(t, func() bool { // the first Publish after the re-creation may fail: franz-go learns of it then
				return app.Publish(ctx, &kgo.Record{Topic: "audit", Value: []byte("a2")}) == nil
			}, "no Publish to the new topic succeeds")
			require.Equal(t, []string{"a2"}, readValues(t, c, "audit"))
			state, reason := app.State()
			require.Equal(t, runtime.StateRunning, state, "%v", reason)
		})
	}
}

// readValues returns the values of topic's records under read_committed.
func readValues(t *testing.T, c *kfaketest.Cluster, topic string) []string {
	t.Helper()
	var got []string
	for _, r := range c.ReadAll(t, topic, true) {
		got = append(got, string(r.Value))
	}
	return got
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

// heldFromOffset3 starts an App on sub (manual partition 0 of "x") whose handler holds the records
// from offset 3 on until gate is closed, and returns once offset 3 is committed.
func heldFromOffset3(t *testing.T, c *kfaketest.Cluster, sub runtime.Subscription) (*runtime.App, *observer, chan struct{}) {
	t.Helper()
	gate := make(chan struct{})
	o := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(o))...)
	runtime.Handle(app, sub, runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
		if d.Record().Offset >= 3 {
			return await(ctx, gate)
		}
		return nil
	}), runtime.RetryToSource())
	startNoCleanup(t, app)
	eventually(t, func() bool { return o.lastCommitted("x", 0) == 3 }, "the first commit")
	return app, o, gate
}

// A manual subscription asks a broker for its topic's ID before each commit. A broker that does
// not answer that question (here broker 0, not the group's coordinator) costs the commit at most
// probeTimeout (1 s), and the commit goes ahead: the position reaches the coordinator (helper-107:
// the question spent the commit's whole 5 s bound, every commit failed, and Shutdown failed with
// ErrCommitTimeout). Shutdown runs once broker 0 answers again: franz-go itself needs the topic's
// ID for an OffsetCommit v10, and when its own metadata request went to broker 0 it answered the
// final commit UNKNOWN_TOPIC_OR_PARTITION until the 5 s bound (7 runs in 25).
func TestAManualCommitGoesAheadWhenItsTopicQuestionGoesUnanswered(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Brokers(3), kfaketest.Topic("x", 1))
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	group := ""
	for i := 0; group == ""; i++ { // a group whose coordinator is not broker 0
		require.Less(t, i, 20, "every group's coordinator is broker 0")
		g := fmt.Sprintf("gm%d", i)
		resp := kadm.NewClient(cl).FindGroupCoordinators(ctx, g)
		require.NoError(t, resp.Error())
		if resp[g].NodeID != 0 {
			group = g
		}
	}
	cl.Close()
	c.ProduceValues(t, "x", 0, values("v", 6)...)
	app, o, gate := heldFromOffset3(t, c, runtime.Partitions("x", 0).Group(group).Commit(runtime.Tracked))

	k := c.Kfake()
	release := make(chan struct{})
	var once sync.Once
	answer := func() { once.Do(func() { close(release) }) }
	defer answer()
	k.ControlKey(int16(kmsg.Metadata), func(kmsg.Request) (kmsg.Response, error, bool) {
		k.KeepControl()
		if k.CurrentNode() == 0 {
			k.SleepControl(func() { <-release }) // broker 0 answers no metadata request
		}
		return nil, nil, false
	})
	close(gate)
	eventually(t, func() bool { return o.lastCommitted("x", 0) == 6 }, "the coordinator, reachable all along, got no commit")
	answer()
	require.NoError(t, app.Shutdown(ctx))
}

// One broker's answer that a manual subscription's topic is unknown (a broker behind the others,
// here one Metadata answer) does not drop the positions it was about to commit: only a commit the
// coordinator refuses for an unknown topic, which a broker confirms, does (helper-107: the Auto
// position was dropped for good, and the handled record 3 was left uncommitted).
func TestAManualCommitKeepsItsPositionsOnOneUnknownTopicAnswer(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("x", 1))
	c.ProduceValues(t, "x", 0, values("v", 4)...)
	app, _, gate := heldFromOffset3(t, c, runtime.Partitions("x", 0).Group("gm"))

	k := c.Kfake()
	answered := make(chan struct{})
	k.ControlKey(int16(kmsg.Metadata), func(kr kmsg.Request) (kmsg.Response, error, bool) {
		req := kr.(*kmsg.MetadataRequest)
		if len(req.Topics) != 1 || req.Topics[0].Topic == nil || *req.Topics[0].Topic != "x" {
			k.KeepControl()
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.MetadataResponse)
		rt := kmsg.NewMetadataResponseTopic()
		rt.Topic = kmsg.StringPtr("x")
		rt.ErrorCode = kerr.UnknownTopicOrPartition.Code
		resp.Topics = append(resp.Topics, rt)
		close(answered)
		return resp, nil, true // once
	})
	close(gate)
	<-answered // the committer asked: Shutdown waits for that commit to end
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Shutdown(ctx))
	require.Equal(t, map[int32]int64{0: 4}, c.Committed(t, "gm", "x"), "record 3 was handled")
}

// A dead-letter topic deleted and created again: the App's producer forgets it and writes the
// later dead letters to the new topic, once each; the App runs on, and the input is committed to
// its end.
func TestADeadLetterTopicCreatedAgain(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("dlq", 1))
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return errors.New("always") }),
		runtime.MaxAttempts(1), runtime.DeadLetter("dlq"))
	start(t, app)
	c.ProduceValues(t, "in", 0, "a0", "a1", "a2")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	require.Equal(t, []string{"a0", "a1", "a2"}, readValues(t, c, "dlq"))

	recreate(t, c, "dlq")
	c.ProduceValues(t, "in", 0, "b0", "b1", "b2")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 6})
	require.Equal(t, []string{"b0", "b1", "b2"}, readValues(t, c, "dlq"), "the later dead letters, once each")
	state, reason := app.State()
	require.Equal(t, runtime.StateRunning, state, "%v", reason)
}
