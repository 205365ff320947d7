package txn

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The barrier opens only once the window is sealed and every record is done.
func TestWaitReturnsOnceSealedAndDone(t *testing.T) {
	w := New(context.Background())
	w.Add(2)
	w.Done()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	require.ErrorIs(t, w.Wait(ctx), context.DeadlineExceeded, "not sealed, one pending")
	w.Seal()
	w.Done()
	require.NoError(t, w.Wait(context.Background()))
	require.Equal(t, 0, w.Pending())
	require.Panics(t, func() { w.Add(1) })
}

// Aborting cancels the handlers' context, wakes the barrier with the first reason, and a closed
// window refuses produces.
func TestAbortCancelsAndCloseRefusesProduces(t *testing.T) {
	w := New(context.Background())
	w.Add(1)
	first, second := errors.New("retry asked"), errors.New("later")
	w.Abort(first)
	w.Abort(second)
	require.ErrorIs(t, w.Wait(context.Background()), first)
	require.ErrorIs(t, context.Cause(w.Context()), first)
	ran := false
	require.NoError(t, w.Produce(func() { ran = true }))
	require.True(t, ran)
	w.Close()
	require.True(t, w.Closed())
	ran = false
	require.ErrorIs(t, w.Produce(func() { ran = true }), ErrClosed)
	require.False(t, ran)
}
