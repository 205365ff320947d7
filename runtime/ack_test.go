package runtime_test

import (
	"fmt"
	"sort"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// Acking everything and stopping gracefully commits the high watermark of every partition, and a
// restarted App receives nothing but what was produced after the restart (DESIGN §3.2, §3.7).
func TestAckAllCommitsHighWatermarkAndRestartSeesOnlyNewRecords(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		for _, parts := range []int32{1, 3} {
			t.Run(fmt.Sprintf("%s/%d partitions", mode, parts), func(t *testing.T) {
				c := kfaketest.New(t, kfaketest.Topic("in", parts))
				want := map[int32]int64{}
				var produced []string
				for p := range parts {
					var vs []string
					for i := range 10 {
						vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
					}
					c.ProduceValues(t, "in", p, vs...)
					produced = append(produced, vs...)
					want[p] = 10
				}
				sub := runtime.Topic("in").Group("g").Commit(mode)

				var first seen
				app := runtime.New(appOpts(c)...)
				runtime.Handle(app, sub, first.handler(), runtime.Workers(3))
				start(t, app)
				c.WaitCommitted(t, "g", "in", want)
				stop(t, app)
				require.Equal(t, want, c.Committed(t, "g", "in"))
				got := first.values()
				sort.Strings(got)
				sort.Strings(produced)
				require.Equal(t, produced, got, "every record handled exactly once")

				var second seen
				app2 := runtime.New(appOpts(c)...)
				runtime.Handle(app2, sub, second.handler())
				start(t, app2)
				var sentinels []string
				for p := range parts {
					v := fmt.Sprintf("sentinel-%d", p)
					c.ProduceValues(t, "in", p, v)
					sentinels = append(sentinels, v)
				}
				eventually(t, func() bool { return second.len() >= int(parts) }, "sentinels not handled")
				got = second.values()
				sort.Strings(got)
				require.Equal(t, sentinels, got, "a restarted App sees only the sentinels")
			})
		}
	}
}
