package probe

import (
	"context"
	"fmt"
	"io"
	"net"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

// A refused dial, wrapped or not, is a dial failure; an error after a connection is not.
func TestDialFailed(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	_, derr := net.Dial("tcp", addr)
	require.Error(t, derr)
	require.True(t, DialFailed(derr))
	require.True(t, DialFailed(fmt.Errorf("unable to dial: %w", derr)))
	require.False(t, DialFailed(io.EOF))
	require.False(t, DialFailed(&net.OpError{Op: "read", Err: io.EOF}))
}

// A client that has discovered no broker cannot be asked: ErrNoBroker, at once.
func TestMetadataWithoutABroker(t *testing.T) {
	cl, err := kgo.NewClient(kgo.SeedBrokers("127.0.0.1:1"))
	require.NoError(t, err)
	defer cl.Close()
	_, err = Metadata(context.Background(), cl, "t")
	require.ErrorIs(t, err, ErrNoBroker)
}
