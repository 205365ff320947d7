package kfaketest_test

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// A connected Cluster works through requests only: here against a kfake cluster's addresses, as
// it would against real brokers. Names carry the per-Connect prefix, the helpers see exactly what
// the in-process view sees, and Close deletes the topics it created.
func TestConnectWrapsBrokersItDidNotStart(t *testing.T) {
	c := kfaketest.New(t)
	rc := kfaketest.Connect(t, c.Addrs(), kfaketest.Topic("t", 2))
	require.True(t, rc.Connected())
	require.False(t, c.Connected())
	require.Equal(t, "x", c.Name("x"), "New has no prefix")
	topic := rc.Name("t")
	require.True(t, strings.HasPrefix(topic, "tidemark-"), topic)
	require.True(t, strings.HasSuffix(topic, "-t"), topic)
	require.NotEqual(t, topic, kfaketest.Connect(t, c.Addrs()).Name("t"), "every Connect has its own prefix")
	require.Equal(t, map[int32]int64{0: 0, 1: 0}, c.HighWatermarks(t, topic), "created in the cluster")

	// produce, read (markers and aborted records included), high watermarks
	rc.ProduceValues(t, topic, 1, "a", "b")
	rc.ProduceTxn(t, rc.Name("tx"), false, &kgo.Record{Topic: topic, Partition: 1, Value: []byte("aborted")})
	require.Equal(t, map[int32]int64{0: 0, 1: 4}, rc.HighWatermarks(t, topic))
	require.Equal(t, c.HighWatermarks(t, topic), rc.HighWatermarks(t, topic))
	require.Equal(t, []string{"a", "b"}, values(rc.ReadAll(t, topic, true)))
	require.Equal(t, []string{"a", "b", "aborted"}, values(rc.ReadAll(t, topic, false)))

	// committed offsets
	adm := kadm.NewClient(mustClient(t, rc.ClientOpts()...))
	os := kadm.Offsets{}
	os.AddOffset(topic, 1, 4, -1)
	require.NoError(t, adm.CommitAllOffsets(t.Context(), rc.Name("g"), os))
	rc.WaitCommitted(t, rc.Name("g"), topic, map[int32]int64{1: 4})
	require.Equal(t, map[int32]int64{1: 4}, rc.Committed(t, rc.Name("g"), topic))

	// a topic created later; a missing one
	rc.CreateTopic(t, rc.Name("later"), 3)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 0}, rc.HighWatermarks(t, rc.Name("later")))
	_, err := rc.HighWatermarksContext(t.Context(), rc.Name("missing"))
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
	require.ErrorIs(t, rc.CreateTopicContext(t.Context(), topic, 1), kerr.TopicAlreadyExists)

	// the kfake-only features say so
	for name, fn := range map[string]func(){
		"Kfake":       func() { rc.Kfake() },
		"CommitLog":   func() { rc.CommitLog() },
		"FailProduce": func() { rc.FailProduce(topic, 1, kerr.InvalidRecord) },
		"FailCommit":  func() { rc.FailCommit("g", 1, kerr.InvalidRecord) },
		"HoldProduce": func() { rc.HoldProduce() },
	} {
		require.PanicsWithError(t, "kfaketest: "+name+": "+kfaketest.ErrKfakeOnly.Error(), fn, name)
	}

	// ClientOpts suits real brokers: a session timeout they accept
	cl := mustClient(t, append(rc.ClientOpts(), kgo.ConsumerGroup(rc.Name("g2")), kgo.ConsumeTopics(topic))...)
	cl.PollFetches(ctxFor(t, time.Second)) // joins with ConnectedSessionTimeout
	cl.Close()

	rc.Close()
	rc.Close() // idempotent
	_, err = c.HighWatermarksContext(t.Context(), topic)
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition, "Close deleted the topics it created")
	_, err = c.HighWatermarksContext(t.Context(), rc.Name("later"))
	require.ErrorIs(t, err, kerr.UnknownTopicOrPartition)
}

// Connect fails, naming the brokers' problem, when nothing listens; a Prefix given is used as is.
func TestConnectFailsWithoutBrokersAndHonoursPrefix(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	_, err := kfaketest.ConnectContext(ctx, []string{"127.0.0.1:1"})
	require.ErrorContains(t, err, "reach the brokers")
	_, err = kfaketest.ConnectContext(ctx, nil)
	require.ErrorContains(t, err, "no brokers")

	c := kfaketest.New(t, kfaketest.Prefix("run7."), kfaketest.Topic("t", 1))
	require.Equal(t, "run7.t", c.Name("t"))
	require.Equal(t, map[int32]int64{0: 0}, c.HighWatermarks(t, "run7.t"))
	rc := kfaketest.Connect(t, c.Addrs(), kfaketest.Prefix("shared."))
	require.Equal(t, "shared.g", rc.Name("g"))
}

// OnCommit sees every commit as the cluster receives it, in order, until removed.
func TestCommitLogOnCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 2))
	var (
		got    []kfaketest.Commit
		logLen []int
	)
	remove := c.CommitLog().OnCommit(func(cm kfaketest.Commit) {
		got = append(got, cm) // the cluster's request loop: no other writer
		logLen = append(logLen, len(c.CommitLog().All()))
	})
	adm := kadm.NewClient(mustClient(t, c.ClientOpts()...))
	commit := func(at int64) {
		os := kadm.Offsets{}
		os.AddOffset("t", 0, at, -1)
		os.AddOffset("t", 1, at+10, -1)
		require.NoError(t, adm.CommitAllOffsets(t.Context(), "g", os))
	}
	commit(1)
	commit(2)
	remove()
	commit(3)
	require.Len(t, got, 4)
	require.Equal(t, []int{2, 2, 4, 4}, logLen, "called once the log holds the whole request")
	for i, cm := range got {
		require.Equal(t, i, cm.Seq)
		require.Equal(t, int64(i/2+1+10*int(cm.Partition)), cm.Offset, "%+v", cm)
	}
	require.NotEqual(t, got[0].Partition, got[1].Partition)
	require.Len(t, c.CommitLog().All(), 6)
}

// A child stops gracefully on Terminate when it runs until ChildEnv.Context ends; the parent's
// notes land in its event log in the order they were written, after the child's earlier events.
func TestTerminateAndParentNotes(t *testing.T) {
	if env, ok := kfaketest.Child(); ok {
		ctx, stop := env.Context()
		defer stop()
		env.Log.Note("ready", boolText(env.Connected))
		<-ctx.Done()
		env.Log.Note("stopping", context.Cause(ctx).Error())
		return
	}
	c := kfaketest.New(t)
	p := c.Spawn(t, nil)
	p.WaitEvents(t, func(evs []kfaketest.Event) bool { return len(evs) == 1 })
	p.Note("parent", "after ready")
	require.NoError(t, p.Terminate(t))
	require.NoError(t, p.Terminate(t), "an exited run: its exit status again")
	p.Note("parent", "after exit")
	want := []kfaketest.Event{
		{Run: 1, Kind: kfaketest.EventNote, Note: "ready", Text: "false", Seq: 0},
		{Run: 0, Kind: kfaketest.EventNote, Note: "parent", Text: "after ready", Seq: 1},
		{Run: 1, Kind: kfaketest.EventNote, Note: "stopping", Text: "terminated signal received", Seq: 2},
		{Run: 0, Kind: kfaketest.EventNote, Note: "parent", Text: "after exit", Seq: 3},
	}
	require.Equal(t, want, p.Events())

	// a child of a connected cluster knows it; a Terminate right after the start waits until the
	// child handles SIGTERM, so it still stops gracefully
	rc := kfaketest.Connect(t, c.Addrs())
	p2 := rc.Spawn(t, nil)
	require.NoError(t, p2.Terminate(t))
	evs := p2.Events()
	require.Len(t, evs, 2)
	require.Equal(t, []string{"ready", "stopping"}, []string{evs[0].Note, evs[1].Note})
	require.Equal(t, "true", evs[0].Text)
}

func boolText(b bool) string {
	if b {
		return "true"
	}
	return "false"
}

func mustClient(t *testing.T, opts ...kgo.Opt) *kgo.Client {
	t.Helper()
	cl, err := kgo.NewClient(opts...)
	require.NoError(t, err)
	t.Cleanup(cl.Close)
	return cl
}

func ctxFor(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}
