package kfaketest_test

import (
	"context"
	"fmt"
	"net"
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

// Tests of the harness used wrongly or late (helper-58): each ends with a clear error instead of
// hanging a test or failing with an unrelated one.

// Every helper of a closed Cluster returns ErrClosed at once. ReadAll, HighWatermarks and
// CreateTopic hung for good (kfake answers no admin call once closed), whatever their ctx, and
// WaitCommitted polled until its bound.
func TestHelpersOfAClosedClusterSayItIsClosed(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	c.ProduceValues(t, "t", 0, "a")
	c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for name, call := range map[string]func() error{
		"ReadAll":        func() error { _, err := c.ReadAllContext(ctx, "t", false); return err },
		"HighWatermarks": func() error { _, err := c.HighWatermarksContext(ctx, "t"); return err },
		"CreateTopic":    func() error { return c.CreateTopicContext(ctx, "u", 1) },
		"Produce":        func() error { _, err := c.ProduceValuesContext(ctx, "t", 0, "b"); return err },
		"ProduceTxn": func() error {
			_, err := c.ProduceTxnContext(ctx, "x", true, &kgo.Record{Topic: "t", Value: []byte("c")})
			return err
		},
		"Committed":     func() error { _, err := c.CommittedContext(ctx, "g", "t"); return err },
		"WaitCommitted": func() error { return c.WaitCommittedContext(ctx, "g", "t", map[int32]int64{0: 1}) },
		"CommitLog.Wait": func() error { // waited for its ctx (helper-78)
			return c.CommitLog().WaitContext(ctx, func([]kfaketest.Commit) bool { return false })
		},
	} {
		require.ErrorIs(t, call(), kfaketest.ErrClosed, name)
	}
	require.NoError(t, ctx.Err(), "a helper waited for its ctx")
}

// The test-form helpers work in a t.Cleanup: the testing package cancels t.Context() before the
// cleanups run, and the helpers, bounded by it, failed there with "context canceled".
func TestHelpersWorkInACleanup(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	var hw map[int32]int64
	var read []*kgo.Record
	t.Run("sub", func(t *testing.T) {
		t.Cleanup(func() {
			c.ProduceValues(t, "t", 0, "late")
			hw = c.HighWatermarks(t, "t")
			read = c.ReadAll(t, "t", true)
			c.CreateTopic(t, "u", 1)
		})
	})
	require.Equal(t, map[int32]int64{0: 1}, hw)
	require.Equal(t, []string{"late"}, values(read))
}

// A produce held by HoldProduce ends with its ctx: franz-go waits for a request already sent
// whatever its ctx, and the helpers waited with it, past ctx and WaitTimeout.
func TestAHeldProduceEndsWithItsCtx(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	release := c.HoldProduce()
	defer release()
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	_, err := c.ProduceValuesContext(ctx, "t", 0, "held")
	require.ErrorIs(t, err, context.DeadlineExceeded)
}

// The kfake-only features panic with an error that errors.Is matches (it was a string).
func TestKfakeOnlyPanicsWithAnError(t *testing.T) {
	c := kfaketest.New(t)
	rc := kfaketest.Connect(t, c.Addrs())
	defer func() {
		err, ok := recover().(error)
		require.True(t, ok, "the panic value is an error")
		require.ErrorIs(t, err, kfaketest.ErrKfakeOnly)
	}()
	rc.HoldProduce()
}

// Names Kafka refuses are refused on kfake too (it took them).
func TestCreateTopicRefusesNamesKafkaRefuses(t *testing.T) {
	c := kfaketest.New(t)
	for _, name := range []string{"", ".", "..", "a b", "a/b", string(make([]byte, 250))} {
		require.ErrorIs(t, c.CreateTopicContext(t.Context(), name, 1), kerr.InvalidTopicException, "%q", name)
	}
	require.NoError(t, c.CreateTopicContext(t.Context(), "ok.name_with-dashes", 1))
}

// A fault needs an error: nil would answer UNKNOWN_SERVER_ERROR.
func TestAFaultWithoutAnErrorPanics(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	require.PanicsWithValue(t, "kfaketest: FailProduce: err must be a kerr error, not nil", func() { c.FailProduce("t", 1, nil) })
	require.PanicsWithValue(t, "kfaketest: FailCommit: err must be a kerr error, not nil", func() { c.FailCommit("g", 1, nil) })
}

// Connect waits, within its bound, for brokers that are not listening yet; with none it fails at
// its bound, naming the dial error. It failed at once on "connection refused".
func TestConnectWaitsForBrokersStartingBesideTheTests(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	port := ln.Addr().(*net.TCPAddr).Port
	require.NoError(t, ln.Close())
	addr := fmt.Sprintf("127.0.0.1:%d", port)

	done := make(chan error, 1)
	var rc *kfaketest.Cluster
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
		defer cancel()
		var err error
		rc, err = kfaketest.ConnectContext(ctx, []string{addr})
		done <- err
	}()
	c := kfaketest.New(t, kfaketest.KfakeOpts(kfake.Ports(port)))
	require.NoError(t, <-done)
	defer rc.Close()
	require.Equal(t, c.Addrs(), rc.Addrs())

	// Long enough for a first dial to fail on a loaded machine: the error names the last one. (With
	// 300 ms, a run under load saw none; and an attempt cut by the bound returned ctx's error alone.)
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err = kfaketest.ConnectContext(ctx, []string{"127.0.0.1:1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "connection refused")
}

// A helper and Close racing: the helper returns (its answer, or ErrClosed), never blocks in
// kfake's admin loop, which a closed cluster no longer serves (helper-60: blocked for good, whatever
// its ctx). The cluster's loop is kept busy while they race.
func TestAHelperRacingCloseReturns(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	inLoop := make(chan struct{})
	var once sync.Once
	c.Kfake().Fault(kfake.Fault{
		Keys: []kmsg.Key{kmsg.Metadata},
		Err:  kerr.UnknownServerError,
		When: func(kmsg.Request) bool { // runs on the cluster's loop: it is busy meanwhile
			once.Do(func() { close(inLoop); time.Sleep(300 * time.Millisecond) })
			return false
		},
		Count: -1,
	})
	other, err := kgo.NewClient(c.ClientOpts()...)
	require.NoError(t, err)
	defer other.Close()
	go func() { _, _ = kadm.NewClient(other).ListBrokers(context.Background()) }()
	<-inLoop
	returned := make(chan error, 1)
	go func() {
		_, err := c.HighWatermarksContext(context.Background(), "t")
		returned <- err
	}()
	c.Close()
	if err := returnedBy(t, returned, "HighWatermarksContext racing Close"); err != nil {
		require.ErrorIs(t, err, kfaketest.ErrClosed)
	}
}

// returnedBy waits for what's error on ch, failing t if none comes within WaitTimeout.
func returnedBy(t *testing.T, ch <-chan error, what string) error {
	t.Helper()
	select {
	case err := <-ch:
		return err
	case <-time.After(kfaketest.WaitTimeout):
		t.Fatalf("%s did not return", what)
		return nil
	}
}

// A ReadAll waiting for a fetch when the Cluster closes returns ErrClosed at once; it polled the
// dead brokers until its ctx ended (helper-60).
func TestReadAllEndsWhenTheClusterCloses(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	c.ProduceValues(t, "t", 0, "a")
	fetching, unblock := make(chan struct{}), make(chan struct{})
	defer close(unblock)
	var once sync.Once
	c.Kfake().ControlKey(int16(kmsg.Fetch), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.Kfake().KeepControl()
		once.Do(func() { close(fetching) })
		c.Kfake().SleepControl(func() { <-unblock }) // a fetch that does not come back
		return nil, nil, false
	})
	returned := make(chan error, 1)
	go func() { _, err := c.ReadAllContext(context.Background(), "t", false); returned <- err }()
	<-fetching
	c.Close()
	require.ErrorIs(t, returnedBy(t, returned, "ReadAll after Close"), kfaketest.ErrClosed)
}

// A CommitLog wait running when the Cluster closes returns ErrClosed at once; it waited for its
// ctx, for good with context.Background() (helper-78).
func TestACommitLogWaitEndsWhenTheClusterCloses(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("t", 1))
	waiting := make(chan struct{})
	var once sync.Once
	returned := make(chan error, 1)
	go func() {
		returned <- c.CommitLog().WaitContext(context.Background(), func([]kfaketest.Commit) bool {
			once.Do(func() { close(waiting) }) // cond runs once before the wait blocks
			return false
		})
	}()
	<-waiting
	c.Close()
	require.ErrorIs(t, returnedBy(t, returned, "CommitLog.WaitContext after Close"), kfaketest.ErrClosed)
	// A ctx already ended says so first, as the other helpers do, every time (a select chose).
	ended, cancel := context.WithCancel(context.Background())
	cancel()
	for range 50 {
		require.ErrorIs(t, c.CommitLog().WaitContext(ended, func([]kfaketest.Commit) bool { return false }), context.Canceled)
	}
}

// A failed produce waits for the call's other records before it returns: the caller may read them.
// It returned at the first error while franz-go was still writing the others (a data race on
// their Offset, helper-60).
func TestAFailedProduceWaitsForItsOtherRecords(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 1))
	c.ProduceValues(t, "a", 0, "first")
	good := &kgo.Record{Topic: "a", Value: []byte("good")}
	bad := &kgo.Record{Topic: "a", Partition: 7, Value: []byte("bad")}
	_, err := c.ProduceContext(t.Context(), good, bad)
	require.ErrorContains(t, err, "invalid record partitioning choice")
	require.Equal(t, int64(1), good.Offset)
	require.Equal(t, map[int32]int64{0: 2}, c.HighWatermarks(t, "a"))
}

// A transaction whose produce did not finish by ctx's end is aborted all the same (with a ctx of
// its own): the abort used the ended ctx, so no EndTxn was sent and the open transaction held
// read_committed readers back until its timeout (helper-60).
func TestProduceTxnAbortsWhenItsCtxEnds(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("a", 1), kfaketest.Topic("b", 1))
	c.FailProduce("b", -1, kerr.NotEnoughReplicas) // retriable: b's record is retried until ctx ends
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	_, err := c.ProduceTxnContext(ctx, "tx", true,
		&kgo.Record{Topic: "a", Value: []byte("acked")},
		&kgo.Record{Topic: "b", Value: []byte("retried")})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.Eventually(t, func() bool {
		pi := c.Kfake().PartitionInfos("a")[0]
		return pi.LastStableOffset == pi.HighWatermark
	}, 5*time.Second, 10*time.Millisecond, "the transaction on a is still open")
	require.Empty(t, c.ReadAll(t, "a", true), "nothing committed")
}
