package runtime

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kmsg"
)

type committedLog struct {
	NopObserver
	evs []CommittedEvent
}

func (o *committedLog) Committed(e CommittedEvent) { o.evs = append(o.evs, e) }

// An autocommit's Committed events carry the offsets its request committed, for each partition
// the response acknowledged: not the client's CommittedOffsets, which franz-go leaves as they were
// for a response that arrives after its generation moved on (here: a client that never joined has
// none). A v10+ response names its topics by ID only; the request gives the name.
func TestAutocommitEventsCarryTheRequestsOffsets(t *testing.T) {
	c := newBare(t, Auto, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	obs := &committedLog{}
	c.obs, c.observed = obs, true
	id := [16]byte{1, 2, 3}
	req := &kmsg.OffsetCommitRequest{Topics: []kmsg.OffsetCommitRequestTopic{
		{Topic: "t", TopicID: id, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 20}, {Partition: 2, Offset: 30}}},
		{Topic: "u", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 5}}},
	}}
	resp := &kmsg.OffsetCommitResponse{Version: 10, Topics: []kmsg.OffsetCommitResponseTopic{
		{TopicID: id, Partitions: []kmsg.OffsetCommitResponseTopicPartition{{Partition: 0}, {Partition: 1, ErrorCode: 27 /* REBALANCE_IN_PROGRESS */}, {Partition: 2}}},
		{Topic: "u", Partitions: []kmsg.OffsetCommitResponseTopicPartition{{Partition: 0}}},
	}}
	c.onAutoCommit(c.cl, req, resp, nil)
	require.Equal(t, []CommittedEvent{
		{Group: c.group, Topic: "t", Partition: 0, Offset: 10},
		{Group: c.group, Topic: "t", Partition: 2, Offset: 30},
		{Group: c.group, Topic: "u", Partition: 0, Offset: 5},
	}, obs.evs)
}
