package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Shutdown's final commit has its own 5 s bound (DESIGN §3.7), paid once: with a coordinator that
// answers every OffsetCommit with a retriable error (franz-go retries until the bound), leaving
// the group afterwards (CloseAllowingRebalance runs the revoke callback) does not commit again. It
// did, with a fresh 5 s bound: Shutdown took 10 s and sent twice the commits (helper-65). The
// commit's error is ErrCommitTimeout, and nothing is committed.
func TestShutdownPaysTheFinalCommitsBoundOnce(t *testing.T) {
	c, app := startWithThreeHandled(t)

	var commits atomic.Int32
	c.Kfake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		commits.Add(1)
		return commitResponse(req, kerr.CoordinatorLoadInProgress), nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	err := app.Shutdown(ctx)
	took := time.Since(begin)
	t.Logf("Shutdown took %v, %d OffsetCommit requests: %v", took, commits.Load(), err)
	// ErrCommitTimeout, not context.DeadlineExceeded: that one says a drain passed its bound with
	// handlers still running, and none were (helper-75).
	require.ErrorIs(t, err, runtime.ErrCommitTimeout, "the final commit's bound")
	require.NotErrorIs(t, err, context.DeadlineExceeded)
	require.EqualError(t, err, `tidemark: Topic("in"): final commit: tidemark: commit not acknowledged within 5 s`)
	require.Less(t, took, 8*time.Second, "the final commit's 5 s bound was paid twice")
	require.Empty(t, c.Committed(t, "g", "in"))
}

// Past the drain's bound, Shutdown's error wraps ctx's error and, for a ctx with a cause
// (context.WithTimeoutCause), the cause too: errors.Is finds both, whether or not the cause wraps
// ctx's error itself. It wrapped only the cause, so errors.Is(err, context.DeadlineExceeded) was
// false for a plain cause (helper-65); and the first fix dropped a cause that wraps it (helper-67).
func TestShutdownPastItsDrainBoundWrapsCtxErrorAndCause(t *testing.T) {
	for _, tc := range []struct {
		name  string
		cause error
		msg   string
	}{
		{"a plain cause", errors.New("grace period over"), "tidemark: drain: context deadline exceeded: grace period over"},
		{"a cause wrapping DeadlineExceeded", fmt.Errorf("grace period over: %w", context.DeadlineExceeded),
			"tidemark: drain: grace period over: context deadline exceeded"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			blocked := make(chan struct{})
			var once sync.Once
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
			runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked),
				runtime.HandlerFunc(func(ctx context.Context, _ *runtime.Delivery) error {
					once.Do(func() { close(blocked) })
					<-ctx.Done()
					return ctx.Err()
				}))
			startNoCleanup(t, app)
			c.ProduceValues(t, "in", 0, "a")
			waitClosed(t, blocked, "the handler never ran")
			ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, tc.cause)
			defer cancel()
			err := app.Shutdown(ctx)
			require.ErrorIs(t, err, context.DeadlineExceeded)
			require.ErrorIs(t, err, tc.cause)
			require.ErrorContains(t, err, tc.msg)
		})
	}
}

// A final commit the coordinator refuses at once (a non-retriable error, before the 5 s bound) is
// tried again as the client leaves the group, by the revoke callback: the 3 handled records are
// committed, not read again after a restart. Shutdown still reports the refusal. Skipping every
// commit on leaving (so that a commit past its bound is not paid twice) lost that retry
// (helper-67).
func TestShutdownCommitsAgainOnLeavingAfterARefusedFinalCommit(t *testing.T) {
	c, app := startWithThreeHandled(t)

	var commits atomic.Int32
	c.Kfake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		if commits.Add(1) > 1 {
			return nil, nil, false // the coordinator answers
		}
		return commitResponse(req, kerr.OffsetMetadataTooLarge), nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err := app.Shutdown(ctx)
	require.ErrorIs(t, err, kerr.OffsetMetadataTooLarge, "the final commit's refusal")
	require.Equal(t, int32(2), commits.Load(), "the final commit, then the leave's")
	require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "g", "in"))
}

// commitResponse answers an OffsetCommit request with code for each of its partitions.
func commitResponse(req kmsg.Request, code *kerr.Error) kmsg.Response {
	r := req.(*kmsg.OffsetCommitRequest)
	resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
	for _, rt := range r.Topics {
		st := kmsg.NewOffsetCommitResponseTopic()
		st.Topic = rt.Topic
		for _, rp := range rt.Partitions {
			sp := kmsg.NewOffsetCommitResponseTopicPartition()
			sp.Partition, sp.ErrorCode = rp.Partition, code.Code
			st.Partitions = append(st.Partitions, sp)
		}
		resp.Topics = append(resp.Topics, st)
	}
	return resp
}

// startWithThreeHandled starts a Tracked App in group "g" on topic "in" (no autocommit in the
// test's time) and returns once it has handled 3 records produced there; the test shuts it down.
func startWithThreeHandled(t *testing.T) (*kfaketest.Cluster, *runtime.App) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var s seen
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked).Config(kgo.AutoCommitInterval(time.Hour)), s.handler())
	startNoCleanup(t, app)
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	eventually(t, func() bool { return s.len() == 3 }, "3 records not handled")
	return c, app
}

// startNoCleanup starts app; the test shuts it down itself.
func startNoCleanup(t *testing.T, app *runtime.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
}

// A coordinator that answers the final commit with UNKNOWN_TOPIC_OR_PARTITION for a topic that
// exists (one behind on the topic's creation) refused it: the leave's commit tries again and the
// handled records are committed. Taken for a deleted topic's answer, the refusal was logged and
// swallowed, and the offsets never committed (helper-70).
func TestAnUnknownTopicAnswerForATopicThatExistsIsARefusal(t *testing.T) {
	c, app := startWithThreeHandled(t)
	c.FailCommit("g", 1, kerr.UnknownTopicOrPartition)
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.ErrorIs(t, app.Shutdown(ctx), kerr.UnknownTopicOrPartition, "the final commit's refusal")
	require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "g", "in"), "committed as the group was left")
}
