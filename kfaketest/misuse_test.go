package kfaketest_test

import (
	"context"
	"fmt"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"

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

	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	_, err = kfaketest.ConnectContext(ctx, []string{"127.0.0.1:1"})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.ErrorContains(t, err, "connection refused")
}
