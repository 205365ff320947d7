package kfaketest_test

import (
	"context"
	"os"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// kfake bug (franz-go pkg/kfake v0.0.0-20260918054303-01f206a7e32c, classic groups): when a static
// member goes away without leaving (a crash: static members never send LeaveGroup) right after
// its first assignment, while the group runs the cooperative follow-up rebalance, the remaining
// members' JoinGroup requests go unanswered until their client gives up (rebalance timeout 10s +
// franz-go's 10s request overhead: about 20s), in roughly one try in four. Kafka answers them
// once the dead member's session times out (2s here), at the latest at the rebalance timeout
// (10s). Dynamic members are not affected (they leave). No Tidemark code is involved: plain kgo
// clients. The chaos runs (kfaketest/conformance) meet it as a 20s stall after a SIGKILL, during
// which a member keeps consuming as a zombie and its late commits are rejected.
//
// Skipped: it fails (takes ~20s) about one round in four. TIDEMARK_KFAKE_BUGS=1 runs it.
func TestKfakeStaticMemberGoneMidRebalance(t *testing.T) {
	if os.Getenv("TIDEMARK_KFAKE_BUGS") == "" {
		t.Skip("kfake bug: a static member gone mid-rebalance stalls the group ~20s; TIDEMARK_KFAKE_BUGS=1 runs it")
	}
	for round := range 12 {
		c := kfaketest.New(t, kfaketest.Topic("in", 2))
		var wg sync.WaitGroup
		member := func(id string, assigned func()) *kgo.Client {
			cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.InstanceID(id),
				kgo.OnPartitionsAssigned(func(context.Context, *kgo.Client, map[string][]int32) {
					if assigned != nil {
						assigned()
					}
				}))...)
			require.NoError(t, err)
			wg.Go(func() {
				for !cl.PollFetches(context.Background()).IsClientClosed() {
				}
			})
			return cl
		}
		x := member("x", nil)
		_, err := c.Kfake().WaitGroupStable(t.Context(), "g", 1)
		require.NoError(t, err)
		var (
			once sync.Once
			z    *kgo.Client
		)
		ready, gone := make(chan struct{}), make(chan struct{})
		z = member("z", func() { // z goes away as soon as it is first assigned (possibly nothing)
			once.Do(func() { go func() { <-ready; z.Close(); close(gone) }() })
		})
		close(ready)
		y := member("y", nil)
		<-gone
		start := time.Now()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		_, err = c.Kfake().WaitGroupInfo(ctx, "g", func(gi *kfake.GroupInfo) bool {
			return gi.State == "Stable" && len(gi.Members) == 2
		})
		cancel()
		took := time.Since(start)
		x.Close()
		y.Close()
		wg.Wait()
		require.NoError(t, err)
		require.Less(t, took, 10*time.Second, "round %d: the two live members waited %v for a new generation (session timeout 2s, rebalance timeout 10s)", round, took)
	}
}
