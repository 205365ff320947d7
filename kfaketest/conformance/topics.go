package conformance

import (
	"context"
	"errors"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

func topicScenarios() []scenario {
	return []scenario{
		{name: "operations: a topic deleted and created again is read from its start, each record once", run: topicRecreated},
	}
}

// A Tracked App reads a topic that is deleted and created again, with five new records, while it
// runs. Whether its client saw the old topic go first (and then loads the new one as any new
// topic) or saw its name under another topic ID (franz-go then keeps the old ID and reads nothing
// more: the App fails with ErrTopicRecreated, and is started again), every record of the new topic
// is handled exactly once, from its start, and committed: nothing of the old topic's offsets lands
// on the new one (docs/operations.md, deleted and re-created topics).
func topicRecreated(e *env) {
	in, g := e.topic("in", 1), e.name("g")
	e.values(in, 0, "old0", "old1", "old2")
	var seen calls
	sub := runtime.Topic(in).Group(g).Commit(runtime.Tracked).Config(kgo.MetadataMaxAge(250 * time.Millisecond))
	handler := runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
		seen.add(d)
		return nil
	})
	app := e.app()
	runtime.Handle(app, sub, handler)
	e.start(app)
	waitCommitted(e, g, in, map[int32]int64{0: 3}, 20*time.Second)

	news := []string{"new0", "new1", "new2", "new3", "new4"}
	recreateTopic(e, in, news...)
	var failed error
	e.eventually(func() bool {
		if state, reason := app.State(); state == runtime.StateFailed {
			failed = reason
			return true
		}
		return len(seen.values()) >= 3+len(news)
	}, "the App neither failed nor read the new topic")
	e.Logf("the App failed first: %v", failed)
	if failed != nil {
		require.ErrorIs(e, failed, runtime.ErrTopicRecreated)
		e.stop(app)
		again := e.app()
		runtime.Handle(again, sub, handler)
		e.start(again)
	}
	waitCommitted(e, g, in, map[int32]int64{0: 5}, 30*time.Second)
	require.Equal(e, append([]string{"old0", "old1", "old2"}, news...), seen.values(),
		"each record of each topic once (the App failed first: %v)", failed)
}

// recreateTopic deletes topic, creates it again with one partition and writes values to it, with a
// client of its own (the Cluster's keeps the old topic ID, as any franz-go client does). A real
// cluster deletes a topic asynchronously: creating it again is tried until the name is free (20s).
func recreateTopic(e *env, topic string, values ...string) {
	e.Helper()
	cl, err := kgo.NewClient(e.c.ClientOpts()...)
	require.NoError(e, err)
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := kadm.NewClient(cl).DeleteTopics(ctx, topic)
	require.NoError(e, err)
	require.NoError(e, resp.Error())
	for {
		err := e.c.CreateTopicContext(ctx, topic, 1)
		if err == nil {
			break
		}
		if !errors.Is(err, kerr.TopicAlreadyExists) {
			require.NoError(e, err)
		}
		select {
		case <-ctx.Done():
			e.Fatalf("create %s again: %v", topic, err)
		case <-time.After(100 * time.Millisecond):
		}
	}
	for _, v := range values {
		require.NoError(e, cl.ProduceSync(ctx, &kgo.Record{Topic: topic, Value: []byte(v)}).FirstErr())
	}
}
