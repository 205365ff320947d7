package kfaketest_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/tidemark-io/tidemark/kfaketest"
)

func values(recs []*kgo.Record) []string {
	out := make([]string, len(recs))
	for i, r := range recs {
		out[i] = string(r.Value)
	}
	return out
}

func offsets(recs []*kgo.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.Offset
	}
	return out
}

// Transaction markers take offsets: read_committed readers see only committed data, and the
// high watermark counts every marker.
func TestTxnMarkersTakeOffsets(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	// commit a,b (offsets 0,1, marker 2), abort c (offset 3, marker 4): high watermark 5
	committed := c.ProduceTxn(t, "tx", true,
		&kgo.Record{Topic: "t", Value: []byte("a")}, &kgo.Record{Topic: "t", Value: []byte("b")})
	aborted := c.ProduceTxn(t, "tx", false, &kgo.Record{Topic: "t", Value: []byte("c")})
	require.Equal(t, []int64{0, 1}, offsets(committed))
	require.Equal(t, []int64{3}, offsets(aborted))
	require.Equal(t, map[int32]int64{0: 5}, c.HighWatermarks(t, "t"))

	require.Equal(t, []string{"a", "b"}, values(c.ReadAll(t, "t", true)))
	all := c.ReadAll(t, "t", false)
	require.Equal(t, []string{"a", "b", "c"}, values(all))
	require.Equal(t, []int64{0, 1, 3}, offsets(all))
}

// An open transaction holds read_committed readers at the last stable offset.
func TestReadAllCommittedStopsAtOpenTransaction(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	c.ProduceValues(t, "t", 0, "a")
	cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.TransactionalID("open"))...)
	require.NoError(t, err)
	defer cl.Close()
	require.NoError(t, cl.BeginTransaction())
	require.NoError(t, cl.ProduceSync(t.Context(), &kgo.Record{Topic: "t", Value: []byte("pending")}).FirstErr())
	c.ProduceValues(t, "t", 0, "b")

	require.Equal(t, []string{"a"}, values(c.ReadAll(t, "t", true)))
	require.Equal(t, []string{"a", "pending", "b"}, values(c.ReadAll(t, "t", false)))
	require.NoError(t, cl.EndTransaction(t.Context(), kgo.TryAbort))
	require.Equal(t, []string{"a", "b"}, values(c.ReadAll(t, "t", true)))
}

// A read_committed read whose last record below the last stable offset was aborted, its abort
// marker behind another producer's open transaction, ends once that transaction ends: it used to
// wait for the aborted record, which read_committed never delivers, until its ctx ended
// (helper-111).
func TestReadAllCommittedEndsPastAnAbortedRecord(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	txn := func(id string) *kgo.Client {
		cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.TransactionalID(id))...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		require.NoError(t, cl.BeginTransaction())
		return cl
	}
	aborted, open := txn("aborted"), txn("open")
	require.NoError(t, aborted.ProduceSync(t.Context(), &kgo.Record{Topic: "t", Value: []byte("aborted")}).FirstErr())
	require.NoError(t, open.ProduceSync(t.Context(), &kgo.Record{Topic: "t", Value: []byte("open")}).FirstErr())
	require.NoError(t, aborted.EndTransaction(t.Context(), kgo.TryAbort)) // its marker after "open": the last stable offset stays 1
	fetching := make(chan struct{}, 1)
	c.Kfake().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		select {
		case fetching <- struct{}{}:
		default:
		}
		return nil, nil, false
	})
	type result struct {
		recs []*kgo.Record
		err  error
	}
	read := make(chan result, 1)
	go func() {
		recs, err := c.ReadAllContext(t.Context(), "t", true)
		read <- result{recs, err}
	}()
	<-fetching // the read has its end: 1
	require.NoError(t, open.EndTransaction(t.Context(), kgo.TryCommit))
	select {
	case r := <-read:
		require.NoError(t, r.err)
		require.Empty(t, r.recs, "nothing committed below the end the read took")
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatal("the read did not end after the open transaction did")
	}
	require.Equal(t, []string{"open"}, values(c.ReadAll(t, "t", true)))
}

// Keyed records hash as franz-go's default partitioner does; keyless records and ProduceTo
// honour the partition asked for.
func TestProducePartitioning(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 3), kfaketest.Topic("b", 3))
	plain, err := kgo.NewClient(c.ClientOpts()...) // franz-go's default partitioner
	require.NoError(t, err)
	defer plain.Close()
	for _, key := range []string{"k1", "k2", "k3", "k4", "k5"} {
		r := &kgo.Record{Topic: "b", Key: []byte(key)}
		require.NoError(t, plain.ProduceSync(t.Context(), r).FirstErr())
		got := c.Produce(t, &kgo.Record{Topic: "a", Key: []byte(key)})
		require.Equal(t, r.Partition, got[0].Partition, "key %s", key)
	}

	require.Equal(t, int32(2), c.Produce(t, &kgo.Record{Topic: "a", Partition: 2})[0].Partition)
	require.Equal(t, int32(0), c.Produce(t, &kgo.Record{Topic: "a"})[0].Partition)
	for _, key := range []string{"k1", "k2", "k3"} {
		got := c.ProduceTo(t, 1, &kgo.Record{Topic: "a", Key: []byte(key)})
		require.Equal(t, int32(1), got[0].Partition)
	}
	hw := c.HighWatermarks(t, "a")[2]
	got := c.ProduceValues(t, "a", 2, "x", "y")
	require.Equal(t, []int64{hw, hw + 1}, offsets(got))
	require.Equal(t, []int32{2, 2}, []int32{got[0].Partition, got[1].Partition})

	_, err = c.ProduceToContext(t.Context(), 3, &kgo.Record{Topic: "a"})
	require.ErrorContains(t, err, "invalid record partitioning choice")
}

// A group consumer's commit shows up in the commit log with its exact position and generation,
// and in Committed.
func TestCommitLogSeesGroupCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 2))
	c.ProduceValues(t, "t", 1, "a", "b", "c")

	cl, err := kgo.NewClient(append(c.ClientOpts(),
		kgo.ConsumerGroup("g"), kgo.ConsumeTopics("t"), kgo.DisableAutoCommit())...)
	require.NoError(t, err)
	defer cl.Close()
	var got []*kgo.Record
	for len(got) < 3 {
		fs := cl.PollFetches(t.Context())
		require.NoError(t, fs.Err())
		got = append(got, fs.Records()...)
	}
	require.NoError(t, cl.CommitRecords(t.Context(), got...))

	gen := c.Kfake().GroupInfo("g").Epoch
	require.Positive(t, gen)
	commits := c.CommitLog().Of("g", "t", 1)
	require.Len(t, commits, 1)
	cm := commits[0]
	require.Equal(t, int64(3), cm.Offset)
	require.Equal(t, gen, cm.Generation)
	require.Equal(t, got[2].LeaderEpoch, cm.LeaderEpoch)
	require.NotEmpty(t, cm.Member)
	require.False(t, cm.Txn)
	require.Empty(t, c.CommitLog().Of("g", "t", 0))
	require.Equal(t, map[int32]int64{1: 3}, c.Committed(t, "g", "t"))
	c.WaitCommitted(t, "g", "t", map[int32]int64{1: 3})
	require.Empty(t, c.Committed(t, "g", "other"))
	require.Empty(t, c.Committed(t, "nobody", "t"))
}

// A transactional offset commit is logged as such, with its transactional id, and shows in
// Committed once its transaction commits.
func TestCommitLogSeesTxnCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
	c.ProduceValues(t, "in", 0, "a", "b")
	sess, err := kgo.NewGroupTransactSession(append(c.ClientOpts(),
		kgo.TransactionalID("eos"), kgo.ConsumerGroup("g"), kgo.ConsumeTopics("in"),
		kgo.FetchIsolationLevel(kgo.ReadCommitted()))...)
	require.NoError(t, err)
	defer sess.Close()
	var got []*kgo.Record
	for len(got) < 2 {
		fs := sess.PollFetches(t.Context())
		require.NoError(t, fs.Err())
		got = append(got, fs.Records()...)
	}
	require.NoError(t, sess.Begin())
	for _, r := range got {
		require.NoError(t, sess.ProduceSync(t.Context(), &kgo.Record{Topic: "out", Value: r.Value}).FirstErr())
	}
	committed, err := sess.End(t.Context(), kgo.TryCommit)
	require.NoError(t, err)
	require.True(t, committed)

	log := c.CommitLog().Of("g", "in", 0)
	require.Len(t, log, 1)
	require.True(t, log[0].Txn)
	require.Equal(t, "eos", log[0].TxnID)
	require.Equal(t, int64(2), log[0].Offset)
	require.Equal(t, c.Kfake().GroupInfo("g").Epoch, log[0].Generation)
	require.Equal(t, map[int32]int64{0: 2}, c.Committed(t, "g", "in"))
	require.Equal(t, []string{"a", "b"}, values(c.ReadAll(t, "out", true)))
}

// FailProduce fails exactly n produce requests with the error given; nothing they carried is
// written.
func TestFailProduce(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1), kfaketest.Topic("other", 1))

	// non-retriable: each of the first 2 produces fails with the error, the third succeeds
	h := c.FailProduce("t", 2, kerr.InvalidRecord)
	for range 2 {
		_, err := c.ProduceValuesContext(t.Context(), "t", 0, "x")
		require.ErrorIs(t, err, kerr.InvalidRecord)
	}
	c.ProduceValues(t, "other", 0, "not faulted")
	require.Equal(t, []int64{0}, offsets(c.ProduceValues(t, "t", 0, "y")))
	require.Equal(t, 2, h.Hits())

	// retriable: the client retries through 3 failed requests
	h = c.FailProduce("t", 3, kerr.NotEnoughReplicas)
	require.Equal(t, []int64{1}, offsets(c.ProduceValues(t, "t", 0, "z")))
	require.Equal(t, 3, h.Hits())
	require.Equal(t, []string{"y", "z"}, values(c.ReadAll(t, "t", false)))
}

// FailCommit fails exactly n commits of the group; the commit log still sees them.
func TestFailCommit(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	defer adm.Close()
	commit := func(at int64) error {
		os := kadm.Offsets{}
		os.AddOffset("t", 0, at, -1)
		return adm.CommitAllOffsets(t.Context(), "g", os)
	}

	h := c.FailCommit("g", 1, kerr.IllegalGeneration)
	require.ErrorIs(t, commit(1), kerr.IllegalGeneration)
	require.NoError(t, commit(2))
	require.Equal(t, 1, h.Hits())
	require.Equal(t, map[int32]int64{0: 2}, c.Committed(t, "g", "t"))

	log := c.CommitLog().Of("g", "t", 0)
	require.Len(t, log, 2)
	require.Equal(t, []int64{1, 2}, []int64{log[0].Offset, log[1].Offset})
	require.Equal(t, int32(-1), log[0].Generation) // an admin commit
	require.Empty(t, log[0].Member)
}

// Several controls on one key coexist: the commit log keeps recording while a user's own
// observing control and a fault see the same requests.
func TestControlsCoexist(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	seen := make(chan int64, 10)
	c.Kfake().ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		r := req.(*kmsg.OffsetCommitRequest)
		seen <- r.Topics[0].Partitions[0].Offset
		return nil, nil, false
	})
	obs := c.Kfake().Fault(kfake.Fault{Keys: []kmsg.Key{kmsg.OffsetCommit}, Observe: true, Count: -1})
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	adm := kadm.NewClient(cl)
	defer adm.Close()
	for at := int64(1); at <= 3; at++ {
		os := kadm.Offsets{}
		os.AddOffset("t", 0, at, -1)
		require.NoError(t, adm.CommitAllOffsets(t.Context(), "g", os))
		require.Equal(t, at, <-seen)
	}
	require.Len(t, c.CommitLog().Of("g", "t", 0), 3)
	require.Equal(t, 3, obs.Hits())
	c.WaitCommitted(t, "g", "t", map[int32]int64{0: 3})
}

// HoldProduce holds produce requests until released; Close releases a hold nobody released.
func TestHoldProduce(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	arrived := make(chan struct{}, 10)
	c.Kfake().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		arrived <- struct{}{} // runs before the hold's control: kfake runs a key's controls in order
		return nil, nil, false
	})
	release := c.HoldProduce()
	done := make(chan error, 1)
	go func() {
		_, err := c.ProduceValuesContext(context.Background(), "t", 0, "held")
		done <- err
	}()
	<-arrived
	require.Equal(t, map[int32]int64{0: 0}, c.HighWatermarks(t, "t")) // held, not written
	release()
	release() // idempotent
	require.NoError(t, <-done)
	require.Equal(t, map[int32]int64{0: 1}, c.HighWatermarks(t, "t"))
	require.Equal(t, []int64{1}, offsets(c.ProduceValues(t, "t", 0, "after")))
}

func TestCloseReleasesHold(t *testing.T) {
	c, err := kfaketest.Start(kfaketest.Topic("t", 1))
	require.NoError(t, err)
	arrived := make(chan struct{}, 10)
	c.Kfake().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		arrived <- struct{}{}
		return nil, nil, false
	})
	c.HoldProduce()
	cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.RecordRetries(0))...)
	require.NoError(t, err)
	done := make(chan error, 1)
	cl.Produce(context.Background(), &kgo.Record{Topic: "t", Value: []byte("x")}, func(_ *kgo.Record, err error) { done <- err })
	<-arrived
	cl.Close() // the client gives up on the held request; kfake still holds it
	require.ErrorIs(t, <-done, kgo.ErrClientClosed)
	c.Close() // must not hang, and must leave no goroutine behind (TestMain)
	c.Close() // idempotent

}

func TestStartCreatesTopicsAndFailsCleanly(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Brokers(3), kfaketest.Topic("a", 4))
	require.Len(t, c.Addrs(), 3)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 0, 3: 0}, c.HighWatermarks(t, "a"))
	require.ErrorIs(t, c.CreateTopicContext(t.Context(), "a", 1), kerr.TopicAlreadyExists)
	c.CreateTopic(t, "b", 1)
	_, err := c.HighWatermarksContext(t.Context(), "missing")
	require.True(t, errors.Is(err, kerr.UnknownTopicOrPartition))

	_, err = kfaketest.Start(kfaketest.Topic("bad", 0))
	require.Error(t, err)
}

// A partition added after the helper client loaded the topic (kadm CreatePartitions) takes
// records once the client has refreshed its metadata; it failed at once ("invalid record
// partitioning choice of 3 from 2 available", helper-69). A partition the topic does not have
// still fails at once.
func TestProduceToAPartitionAddedLater(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 2))
	c.ProduceValues(t, "in", 1, "before")
	addPartitions(t, c, "in", 2)
	got := c.ProduceValues(t, "in", 3, "x", "y")
	require.Equal(t, []int64{0, 1}, offsets(got))
	require.Equal(t, map[int32]int64{0: 0, 1: 1, 2: 0, 3: 2}, c.HighWatermarks(t, "in"))
	_, err := c.ProduceToContext(t.Context(), 9, &kgo.Record{Topic: "in"})
	require.ErrorContains(t, err, "invalid record partitioning choice")
}

// A produce whose records were partly written is never produced again: records of two topics,
// where the helper client knows partition 3 of "a" but not the one just added to "b", fail with
// "b"'s refusal and "a"'s record is written once. Produced again whole, it was written twice
// (helper-70).
func TestProduceToAPartitionAddedLaterNeverWritesTwice(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 4), kfaketest.Topic("b", 2))
	c.ProduceValues(t, "a", 3, "warm-a") // the helper client loads both topics
	c.ProduceValues(t, "b", 1, "warm-b")
	addPartitions(t, c, "b", 2)

	_, err := c.ProduceToContext(t.Context(), 3, &kgo.Record{Topic: "a", Value: []byte("x")}, &kgo.Record{Topic: "b", Value: []byte("y")})
	require.ErrorContains(t, err, `produce to "b": invalid record partitioning choice`)
	require.Equal(t, map[int32]int64{0: 0, 1: 0, 2: 0, 3: 2}, c.HighWatermarks(t, "a"), "the warm-up and x, once")
}

// addPartitions adds n partitions to topic with a client of its own (kadm CreatePartitions).
func addPartitions(t *testing.T, c *kfaketest.Cluster, topic string, n int) {
	t.Helper()
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).CreatePartitions(t.Context(), n, topic)
	require.NoError(t, err)
	require.NoError(t, resp.Error())
}

// Holds may overlap and follow one another while a request is held: a held request goes on once
// every hold is released, and each is written once. A request used to sleep once per hold it met
// in kfake's SleepControl, and a second sleep of one request races inside kfake (helper-112).
func TestHoldProduceOverlapping(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	arrived := make(chan struct{}, 100)
	c.Kfake().ControlKey(int16(kmsg.Produce), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		arrived <- struct{}{}
		return nil, nil, false
	})
	for i := range 20 {
		first := c.HoldProduce()
		done := make(chan error, 1)
		go func() {
			_, err := c.ProduceValuesContext(context.Background(), "t", 0, fmt.Sprint(i))
			done <- err
		}()
		<-arrived
		second := c.HoldProduce()
		first()
		third := c.HoldProduce()
		second()
		third()
		require.NoError(t, <-done)
		require.Equal(t, map[int32]int64{0: int64(i + 1)}, c.HighWatermarks(t, "t"))
	}
}

// Holds placed and released back to back while producers keep sending: every record is written
// once, and nothing races. With a control per hold, kfake raced on a request that slept in two
// holds' controls (helper-112), and this test hung: a released hold's control stayed installed
// until a request came, so fast holds piled them up.
func TestHoldProduceOnAndOff(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 4))
	const producers, each = 8, 25
	var wg sync.WaitGroup
	for p := range producers {
		cl, err := kgo.NewClient(c.ClientOpts()...)
		require.NoError(t, err)
		t.Cleanup(cl.Close)
		wg.Go(func() {
			for i := range each {
				r := &kgo.Record{Topic: "t", Partition: int32(p % 4), Value: fmt.Appendf(nil, "%d-%d", p, i)}
				require.NoError(t, cl.ProduceSync(context.Background(), r).FirstErr())
			}
		})
	}
	stop := make(chan struct{})
	toggled := make(chan struct{})
	go func() {
		defer close(toggled)
		for {
			select {
			case <-stop:
				return
			default:
			}
			first := c.HoldProduce()
			second := c.HoldProduce()
			first()
			second()
		}
	}()
	wg.Wait()
	close(stop)
	<-toggled
	seen := map[string]int{}
	for _, r := range c.ReadAll(t, "t", true) {
		seen[string(r.Value)]++
	}
	require.Len(t, seen, producers*each)
	for v, n := range seen {
		require.Equal(t, 1, n, v)
	}
}

// A topic deleted and created again takes the produce helpers' records (helper-142: their client
// kept the old topic ID, and every produce failed with UNKNOWN_TOPIC_ID).
func TestAReCreatedTopicTakesTheHelpersRecords(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("x", 1))
	c.ProduceValues(t, "x", 0, "old")
	cl, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer cl.Close()
	resp, err := kadm.NewClient(cl).DeleteTopic(context.Background(), "x")
	require.NoError(t, err)
	require.NoError(t, resp.Err)
	c.CreateTopic(t, "x", 1)
	got := c.ProduceValues(t, "x", 0, "new")
	require.Equal(t, int64(0), got[0].Offset, "the new topic's first record")
	require.Equal(t, []string{"new"}, values(c.ReadAll(t, "x", false)))
}
