package runtime_test

import (
	"context"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
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
