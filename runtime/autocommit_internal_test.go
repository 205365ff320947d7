package runtime

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
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

// A refusal for a partition the request does not name (a response that names its topic by neither
// name nor a known ID) is still passed on, with offset -1; an acknowledgement for one is not, since
// nothing says what it committed.
func TestEachCommittedPassesOnRefusalsItCannotMatch(t *testing.T) {
	req := &kmsg.OffsetCommitRequest{Topics: []kmsg.OffsetCommitRequestTopic{
		{Topic: "t", TopicID: [16]byte{9}, Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 3}}},
	}}
	resp := &kmsg.OffsetCommitResponse{Version: 10, Topics: []kmsg.OffsetCommitResponseTopic{
		{Partitions: []kmsg.OffsetCommitResponseTopicPartition{{Partition: 0, ErrorCode: 12 /* OFFSET_METADATA_TOO_LARGE */}, {Partition: 1}}},
	}}
	type call struct {
		topic     string
		partition int32
		offset    int64
		err       string
	}
	var calls []call
	eachCommitted(req, resp, func(topic string, partition int32, offset int64, err error) {
		calls = append(calls, call{topic, partition, offset, err.Error()})
	})
	require.Len(t, calls, 1)
	require.Equal(t, call{"", 0, -1, calls[0].err}, calls[0])
	require.Contains(t, calls[0].err, "OFFSET_METADATA_TOO_LARGE")
	eachCommitted(nil, resp, func(string, int32, int64, error) { t.Fatal("called without a request") })
}

// onAutoCommit replaces franz-go's default commit callback, which logged failures at Error, so it
// logs them itself (helper-88: refused autocommits were dropped without a word, with no Observer
// and with one): the partitions the coordinator refused in one Warn line, rebalance refusals and
// a request cancelled by the group's leaving or the client's closing at Debug, any other failed
// request at Warn. Committed events are sent for the partitions acknowledged, as before.
func TestAutocommitFailuresAreLogged(t *testing.T) {
	c := newBare(t, Tracked, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
	t.Cleanup(func() {
		c.d.stop()
		c.cl.Close()
	})
	var out bytes.Buffer
	c.log = slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug}))
	lines := func() []string {
		defer out.Reset()
		var ls []string
		for l := range strings.Lines(out.String()) {
			_, rest, _ := strings.Cut(l, "level=") // drop the time
			ls = append(ls, strings.TrimSpace(rest))
		}
		return ls
	}
	req := &kmsg.OffsetCommitRequest{Topics: []kmsg.OffsetCommitRequestTopic{
		{Topic: "t", Partitions: []kmsg.OffsetCommitRequestTopicPartition{{Partition: 0, Offset: 10}, {Partition: 1, Offset: 20}, {Partition: 2, Offset: 30}}},
	}}
	resp := func(codes ...int16) *kmsg.OffsetCommitResponse {
		r := &kmsg.OffsetCommitResponse{Topics: []kmsg.OffsetCommitResponseTopic{{Topic: "t"}}}
		for p, code := range codes {
			r.Topics[0].Partitions = append(r.Topics[0].Partitions, kmsg.OffsetCommitResponseTopicPartition{Partition: int32(p), ErrorCode: code})
		}
		return r
	}

	c.onAutoCommit(c.cl, req, resp(0, 29 /* TOPIC_AUTHORIZATION_FAILED */, 12 /* OFFSET_METADATA_TOO_LARGE */), nil)
	require.Equal(t, []string{`WARN msg="tidemark: autocommit refused; offsets not committed" err=` +
		strconv.Quote("t[1]: "+kerr.TopicAuthorizationFailed.Error()+"\nt[2]: "+kerr.OffsetMetadataTooLarge.Error())}, lines())

	c.onAutoCommit(c.cl, req, resp(27 /* REBALANCE_IN_PROGRESS */, 0, 22 /* ILLEGAL_GENERATION */), nil)
	require.Equal(t, []string{`DEBUG msg="tidemark: autocommit refused during a rebalance" err=` +
		strconv.Quote("t[0]: "+kerr.RebalanceInProgress.Error()+"\nt[2]: "+kerr.IllegalGeneration.Error())}, lines())

	c.onAutoCommit(c.cl, req, resp(0, 0, 0), nil)
	require.Empty(t, lines())

	for _, tc := range []struct {
		err  error
		want string
	}{
		{errors.New("i/o timeout"), `WARN msg="tidemark: autocommit failed" err="i/o timeout"`},
		{fmt.Errorf("commit: %w", context.Canceled), `DEBUG msg="tidemark: autocommit failed" err="commit: context canceled"`},
		{kgo.ErrClientClosed, `DEBUG msg="tidemark: autocommit failed" err="client closed"`},
	} {
		c.onAutoCommit(c.cl, req, nil, tc.err)
		require.Equal(t, []string{tc.want}, lines())
	}
}
