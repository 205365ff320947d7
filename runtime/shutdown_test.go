package runtime_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// Shutdown's final commit has its own 5 s bound (DESIGN §3.7), paid once: with a coordinator that
// answers every OffsetCommit with a retriable error (franz-go retries until the bound), leaving
// the group afterwards (CloseAllowingRebalance runs the revoke callback) does not commit again. It
// did, with a fresh 5 s bound: Shutdown took 10 s and sent twice the commits (helper-65).
func TestShutdownPaysTheFinalCommitsBoundOnce(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var s seen
	app := runtime.New(appOpts(c, runtime.DefaultGroup("g"))...)
	runtime.Handle(app, runtime.Topic("in").Commit(runtime.Tracked), s.handler())
	startNoCleanup(t, app)
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	eventually(t, func() bool { return s.len() == 3 }, "3 records not handled")

	var commits atomic.Int32
	c.Kfake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		commits.Add(1)
		r := req.(*kmsg.OffsetCommitRequest)
		resp := r.ResponseKind().(*kmsg.OffsetCommitResponse)
		for _, rt := range r.Topics {
			st := kmsg.NewOffsetCommitResponseTopic()
			st.Topic = rt.Topic
			for _, rp := range rt.Partitions {
				sp := kmsg.NewOffsetCommitResponseTopicPartition()
				sp.Partition, sp.ErrorCode = rp.Partition, kerr.CoordinatorLoadInProgress.Code
				st.Partitions = append(st.Partitions, sp)
			}
			resp.Topics = append(resp.Topics, st)
		}
		return resp, nil, true
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	begin := time.Now()
	err := app.Shutdown(ctx)
	took := time.Since(begin)
	t.Logf("Shutdown took %v, %d OffsetCommit requests: %v", took, commits.Load(), err)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the final commit's bound")
	require.ErrorContains(t, err, "final commit")
	require.Less(t, took, 8*time.Second, "the final commit's 5 s bound was paid twice")
}

// Past the drain's bound, Shutdown's error wraps ctx's error and, for a ctx with a cause
// (context.WithTimeoutCause), the cause too: errors.Is finds both. It wrapped only the cause, so
// errors.Is(err, context.DeadlineExceeded) was false (helper-65).
func TestShutdownPastItsDrainBoundWrapsCtxErrorAndCause(t *testing.T) {
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
	grace := errors.New("grace period over")
	ctx, cancel := context.WithTimeoutCause(context.Background(), 200*time.Millisecond, grace)
	defer cancel()
	err := app.Shutdown(ctx)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorIs(t, err, grace)
	require.ErrorContains(t, err, "tidemark: drain: context deadline exceeded: grace period over")
}

// startNoCleanup starts app; the test shuts it down itself.
func startNoCleanup(t *testing.T, app *runtime.App) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, app.Start(ctx))
}
