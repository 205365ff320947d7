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
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// kfake bug (franz-go pkg/kfake v0.0.0-20260918054303-01f206a7e32c, classic groups): a live member
// waiting in JoinGroup is expired by its session timer. Clients do not heartbeat while their
// JoinGroup waits, and Kafka bounds that wait with the rebalance timeout, not the session timeout;
// kfake keeps the member's session timer running (group.updateMemberAndRebalance), so when the join
// phase lasts longer than the session timeout (here: waiting for a member that died, 2s) the
// waiting members are removed without an answer, and their JoinGroup hangs until the client gives
// up (rebalance timeout 10s + franz-go's 10s overhead: about 20s). Plain kgo clients, no Tidemark
// code: a static member (static members never send LeaveGroup, like a crashed one) goes away right
// after its first assignment, during the cooperative follow-up rebalance. The chaos runs meet it as a
// 20s stall after a SIGKILL, during which a member consumes as a zombie and its late commits are
// rejected. Fix (kfake): stop the member's session timer while it waits in join, e.g. in
// updateMemberAndRebalance: if !waitingReply.empty() && m.t != nil { m.t.Stop() }.
//
// Skipped: it fails (a round takes ~20s) about one round in four. TIDEMARK_KFAKE_BUGS=1 runs it.
func TestKfakeStaticMemberGoneMidRebalance(t *testing.T) {
	if os.Getenv("TIDEMARK_KFAKE_BUGS") == "" {
		t.Skip("kfake bug: members waiting in JoinGroup are expired by their session timer (a ~20s stall); TIDEMARK_KFAKE_BUGS=1 runs it")
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

// kfake bug (same version), the other half: a member whose connection is gone when kfake answers
// its JoinGroup (it died waiting for the rebalance) never times out, because kfake re-arms a
// member's session timer only after an answer it could deliver (group.reply returns early when
// creq.reply fails). It stays in the group with its assignment, so its partitions are consumed by
// nobody until its instance id rejoins. The chaos runs meet it as a Transactional run whose killed
// member's partitions stay stuck. Fix (kfake): in group.reply, call g.updateHeartbeat(m) whether or
// not creq.reply delivered the answer. With both fixes both tests pass.
//
// Skipped: it always fails on that kfake. TIDEMARK_KFAKE_BUGS=1 runs it.
func TestKfakeMemberGoneWhileJoiningNeverExpires(t *testing.T) {
	if env, ok := kfaketest.Child(); ok { // z: joins as a static member, then is SIGKILLed
		cl, err := kgo.NewClient(append(env.ClientOpts(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.InstanceID("z"))...)
		if err != nil {
			panic(err)
		}
		for {
			cl.PollFetches(context.Background())
		}
	}
	if os.Getenv("TIDEMARK_KFAKE_BUGS") == "" {
		t.Skip("kfake bug: a member gone while its JoinGroup waits never expires; TIDEMARK_KFAKE_BUGS=1 runs it")
	}
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	// x heartbeats every second, so z's JoinGroup waits up to a second for x to rejoin.
	x, err := kgo.NewClient(append(c.ClientOpts(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"), kgo.InstanceID("x"),
		kgo.HeartbeatInterval(time.Second))...)
	require.NoError(t, err)
	var wg sync.WaitGroup
	wg.Go(func() {
		for !x.PollFetches(context.Background()).IsClientClosed() {
		}
	})
	defer func() { x.Close(); wg.Wait() }()
	_, err = c.Kfake().WaitGroupStable(t.Context(), "g", 1)
	require.NoError(t, err)

	joined := make(chan struct{}, 1)
	c.Kfake().ControlKey(int16(kmsg.JoinGroup), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		if r := req.(*kmsg.JoinGroupRequest); r.InstanceID != nil && *r.InstanceID == "z" {
			select {
			case joined <- struct{}{}:
			default:
			}
		}
		return nil, nil, false
	})
	z := c.Spawn(t, nil)
	select {
	case <-joined:
	case <-time.After(10 * time.Second):
		t.Fatal("z never joined")
	}
	z.Kill(t) // while its JoinGroup waits for x to rejoin
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	gi, err := c.Kfake().WaitGroupInfo(ctx, "g", func(gi *kfake.GroupInfo) bool {
		return gi.State == "Stable" && len(gi.Members) == 1
	})
	var members []string
	if gi != nil {
		for _, m := range gi.Members {
			members = append(members, m.MemberID)
		}
	}
	require.NoError(t, err, "10s after z died (session timeout 2s) the group still has %v", members)
}
