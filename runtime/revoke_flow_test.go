package runtime_test

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// pinBalancer is a cooperative balancer that gives partition 0 of topic to the member tagged "B"
// while it is in the group, and every other partition (all of them without B) to the others: a
// test chooses which partition a rebalance moves.
type pinBalancer struct {
	tag, topic string
	partitions int32
}

func (b pinBalancer) ProtocolName() string { return "tidemark-test-pin" }
func (b pinBalancer) IsCooperative() bool  { return true }

func (b pinBalancer) JoinGroupMetadata(interests []string, _ map[string][]int32, _ int32) []byte {
	m := kmsg.NewConsumerMemberMetadata()
	m.Topics, m.UserData = interests, []byte(b.tag)
	return m.AppendTo(nil)
}

func (b pinBalancer) ParseSyncAssignment(a []byte) (map[string][]int32, error) {
	return kgo.ParseConsumerSyncAssignment(a)
}

func (b pinBalancer) MemberBalancer(members []kmsg.JoinGroupResponseMember) (kgo.GroupMemberBalancer, map[string]struct{}, error) {
	return pinMembers{b, members}, map[string]struct{}{b.topic: {}}, nil
}

type pinMembers struct {
	b       pinBalancer
	members []kmsg.JoinGroupResponseMember
}

func (m pinMembers) Balance(map[string]int32) kgo.IntoSyncAssignment {
	plan := pinPlan{}
	var b, others string
	for _, mem := range m.members {
		var meta kmsg.ConsumerMemberMetadata
		_ = meta.ReadFrom(mem.ProtocolMetadata)
		plan[mem.MemberID] = map[string][]int32{}
		if string(meta.UserData) == "B" {
			b = mem.MemberID
		} else {
			others = mem.MemberID
		}
	}
	for p := range m.b.partitions {
		switch {
		case p == 0 && b != "":
			plan[b][m.b.topic] = append(plan[b][m.b.topic], p)
		case others != "":
			plan[others][m.b.topic] = append(plan[others][m.b.topic], p)
		}
	}
	return plan
}

type pinPlan map[string]map[string][]int32

func (p pinPlan) IntoSyncAssignment() []kmsg.SyncGroupRequestGroupAssignment {
	var out []kmsg.SyncGroupRequestGroupAssignment
	for member, topics := range p {
		var a kmsg.ConsumerMemberAssignment
		for t, ps := range topics {
			a.Topics = append(a.Topics, kmsg.ConsumerMemberAssignmentTopic{Topic: t, Partitions: ps})
		}
		out = append(out, kmsg.SyncGroupRequestGroupAssignment{MemberID: member, MemberAssignment: a.AppendTo(nil)})
	}
	return out
}

// Under MaxInFlight, a revoke that brings the subscription down to half lifts its pause and admits
// the kept partitions' backlogs; idle lanes must run them at once, not after the revoked
// partition's drain. Partition 0's head is stuck until the test ends (the revoke's drain bound is
// 30 s) and holds its bound of 100 of the subscription's 150; partition 1 moves only by the
// pause's 100 ms timer. Once partition 0 is revoked, partition 1's 3,000 records are all handled
// while partition 0's drain still waits (before, the lanes slept until the drain ended).
func TestARevokeUnderMaxInFlightWakesLanesForWhatItFrees(t *testing.T) {
	const n = 3000
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	produceParts(t, c, "in", 2, n)
	var handled1 atomic.Int64
	var drainEnded atomic.Bool
	release := newGate()
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.RevokeDrainTimeout(30*time.Second),
		runtime.ClientOpts(kgo.Balancers(pinBalancer{"A", "in", 2})))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			switch r := d.Record(); {
			case r.Partition == 0 && r.Offset == 0:
				select {
				case <-ctx.Done(): // the revoke's drain bound
				case <-release.ch:
				}
				drainEnded.Store(true)
				return nil
			case r.Partition == 1:
				handled1.Add(1)
			}
			return nil
		}), runtime.Workers(3), runtime.MaxInFlightPerPartition(100), runtime.MaxInFlight(150))
	start(t, app)
	t.Cleanup(release.open) // before app's stop (cleanups run last-in first-out)
	eventually(t, func() bool { return handled1.Load() > 0 }, "partition 1 never ran")

	b, err := kgo.NewClient(append(c.ClientOpts(), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.Balancers(pinBalancer{"B", "in", 2}))...)
	require.NoError(t, err)
	defer b.Close()
	polled := make(chan struct{})
	defer func() { b.Close(); <-polled }()
	go func() {
		defer close(polled)
		for !b.PollFetches(context.Background()).IsClientClosed() {
		}
	}()
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		for _, e := range obs.rebal {
			if e.Kind == "revoked" {
				return true
			}
		}
		return false
	}, "partition 0 was never revoked")
	eventually(t, func() bool { return handled1.Load() == n }, "partition 1 handled %d of %d during the revoke", handled1.Load(), n)
	require.False(t, drainEnded.Load(), "partition 1 finished only after partition 0's drain ended")
}
