package runtime_test

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Two live Apps with one InstanceID: the broker fences the older static member when the newer
// joins (KIP-345). The fenced App fails with ErrInstanceFenced and stops, instead of joining again
// (franz-go's group loop would: that fences the newer member in turn, and the two take the
// partitions from each other, both handling records). The newer App reads on alone, from the
// committed offsets, in each commit mode (helper-101).
func TestAStaticMemberFencedByItsInstanceIDFails(t *testing.T) {
	for name, mode := range map[string]func(app string) runtime.CommitMode{
		"Auto":          func(string) runtime.CommitMode { return runtime.Auto },
		"Tracked":       func(string) runtime.CommitMode { return runtime.Tracked },
		"Transactional": func(app string) runtime.CommitMode { return runtime.Transactional("tx-" + app) },
	} {
		t.Run(name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 2))
			for p := range int32(2) {
				c.ProduceValues(t, "in", p, "x")
			}
			var a, b seen
			older := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.InstanceID("pod-0"))...)
			runtime.Handle(older, runtime.Topic("in").Commit(mode("older")), a.handler())
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			errc := make(chan error, 1)
			go func() { errc <- older.Run(ctx) }()
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1, 1: 1})

			newer := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.InstanceID("pod-0"))...)
			runtime.Handle(newer, runtime.Topic("in").Commit(mode("newer")), b.handler())
			start(t, newer)
			var err error
			select {
			case err = <-errc:
			case <-ctx.Done():
				t.Fatal("the fenced App still runs")
			}
			require.ErrorIs(t, err, runtime.ErrInstanceFenced)
			require.ErrorContains(t, err, `Topic("in"): instance id "pod-0-0", group "g": `)
			state, reason := older.State()
			require.Equal(t, runtime.StateFailed, state)
			require.ErrorIs(t, reason, runtime.ErrInstanceFenced)

			for p := range int32(2) {
				c.ProduceValues(t, "in", p, "y")
			}
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2, 1: 2})
			require.Equal(t, []string{"x", "x"}, a.values(), "the fenced App handled nothing after the newer joined")
			require.Equal(t, []string{"y", "y"}, slices.Sorted(slices.Values(b.values())), "the newer App read on from the committed offsets")
		})
	}
}

// A fenced static member can learn it from a commit before a heartbeat tells it (a busy
// Transactional member commits every 100 ms, and heartbeats every 3 s): an OffsetCommit or a
// TxnOffsetCommit answered FENCED_INSTANCE_ID fails the App with ErrInstanceFenced as a fetch's
// does, in each mode, and in a Shutdown's final commit too. Before, a Transactional session made
// itself again and joined under the instance id, fencing the newer member (the two fenced each
// other back and forth), an autocommit's was only logged, and a Shutdown returned the bare
// error with the App Stopped (helper-104).
func TestAStaticMemberFencedAtACommitFails(t *testing.T) {
	for _, tc := range []struct {
		name       string
		sub        runtime.Subscription
		atShutdown bool            // the fence answers Shutdown's final commit
		committed  map[int32]int64 // kfake fences one commit: a later one (the final commit) is taken
	}{
		{"Transactional", runtime.Topic("in").Commit(runtime.Transactional("tx")), false, nil},
		{"Tracked autocommit", runtime.Topic("in").Commit(runtime.Tracked), false, map[int32]int64{0: 1}},
		{"Auto autocommit", runtime.Topic("in"), false, map[int32]int64{0: 1}},
		{"Tracked final commit", runtime.Topic("in").Commit(runtime.Tracked).Config(kgo.AutoCommitInterval(time.Hour)), true, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			var s seen
			app := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.InstanceID("pod-0"))...)
			runtime.Handle(app, tc.sub, s.handler())
			startNoCleanup(t, app)
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			var shutdownErr error
			if tc.atShutdown {
				c.ProduceValues(t, "in", 0, "x")
				eventually(t, func() bool { return s.len() == 1 }, "x not handled")
				c.FailCommit("g", 1, kerr.FencedInstanceID)
				shutdownErr = app.Shutdown(ctx)
				require.ErrorIs(t, shutdownErr, runtime.ErrInstanceFenced)
			} else {
				fence := c.FailCommit("g", 1, kerr.FencedInstanceID)
				c.ProduceValues(t, "in", 0, "x")
				require.NoError(t, fence.Wait(ctx, 1))
				select {
				case <-app.Done():
				case <-ctx.Done():
					t.Fatal("the fenced App still runs")
				}
				err := app.Shutdown(ctx)
				if tc.committed == nil { // the window's End failed: fenced
					require.ErrorIs(t, err, kerr.FencedInstanceID)
				} else {
					require.NoError(t, err)
				}
			}
			state, reason := app.State()
			require.Equal(t, runtime.StateFailed, state)
			require.ErrorIs(t, reason, runtime.ErrInstanceFenced)
			require.ErrorIs(t, reason, kerr.FencedInstanceID)
			require.True(t, strings.HasPrefix(reason.Error(), `tidemark: static member fenced by another member with its instance id: `+
				`Topic("in"): instance id "pod-0-0", group "g": `), reason.Error())
			if tc.atShutdown {
				require.EqualError(t, shutdownErr, reason.Error(), "Shutdown returns what the App failed for")
			}
			require.Equal(t, []string{"x"}, s.values(), "handled once: no session made again")
			if tc.committed == nil {
				require.Empty(t, c.Committed(t, "g", "in"), "nothing committed, nor by leaving the group")
			} else {
				require.Equal(t, tc.committed, c.Committed(t, "g", "in"))
			}
		})
	}
}

// A static member is shutting down, draining a slow handler, when a newer member with its
// instance id joins: only its heartbeat learns of the fence now (the poll loop has stopped, so no
// fetch brings it). The App fails with ErrInstanceFenced, which Shutdown returns, and its group
// loop stops; the newer member reads on (helper-106: Shutdown returned nil, the App was Stopped,
// and franz-go kept joining again under the instance id).
func TestAStaticMemberFencedWhileItDrainsFails(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Tracked, runtime.Transactional("tx-older")} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			entered, release := make(chan struct{}), make(chan struct{})
			older := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.InstanceID("pod-0"))...)
			runtime.Handle(older, runtime.Topic("in").Commit(mode),
				runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
					close(entered)
					<-release // a slow call that ignores its ctx
					return nil
				}))
			startNoCleanup(t, older)
			c.ProduceValues(t, "in", 0, "slow")
			<-entered
			ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
			defer cancel()
			shut := make(chan error, 1)
			go func() { shut <- older.Shutdown(ctx) }()
			eventually(t, func() bool { state, _ := older.State(); return state == runtime.StateShuttingDown }, "no shutdown")

			var b seen
			newer := runtime.New(appOpts(c, runtime.DefaultGroup("g"), runtime.InstanceID("pod-0"))...)
			runtime.Handle(newer, runtime.Topic("in").Commit(runtime.Tracked), b.handler())
			start(t, newer)
			eventually(t, func() bool { state, _ := older.State(); return state == runtime.StateFailed }, "the fence not seen")
			close(release)
			err := <-shut
			require.ErrorIs(t, err, runtime.ErrInstanceFenced)
			_, reason := older.State()
			require.ErrorIs(t, reason, runtime.ErrInstanceFenced)
			c.ProduceValues(t, "in", 0, "next")
			eventually(t, func() bool { return slices.Contains(b.values(), "next") }, "the newer member reads nothing")
			state, reason := newer.State()
			require.Equal(t, runtime.StateRunning, state, "the newer member was fenced in turn: %v", reason)
		})
	}
}
