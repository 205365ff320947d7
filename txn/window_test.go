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

// A window whose records are all done returns nil even when Wait's ctx has already ended: the
// barrier finished (Shutdown with an ended ctx commits a settled window; DESIGN §3.4).
func TestWaitPrefersADoneWindowToAnEndedCtx(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for range 1000 { // Wait's select would pick either ready case at random
		w := New(context.Background())
		w.Add(1)
		w.Seal()
		w.Done()
		require.NoError(t, w.Wait(ctx))
		w.Release()
	}
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

// Release ends a committed window's context with ErrClosed and leaves its parent running; an
// aborted window's context keeps the abort's reason.
func TestReleaseEndsTheContext(t *testing.T) {
	parent, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := New(parent)
	w.Add(1)
	w.Seal()
	w.Done()
	require.NoError(t, w.Wait(context.Background()))
	w.Close()
	require.NoError(t, w.Context().Err(), "closing does not end the context")
	w.Release()
	require.ErrorIs(t, w.Context().Err(), context.Canceled)
	require.ErrorIs(t, context.Cause(w.Context()), ErrClosed)
	require.NoError(t, w.Aborted(), "a released window was not aborted")
	require.NoError(t, parent.Err())

	reason := errors.New("retry asked")
	a := New(parent)
	a.Abort(reason)
	a.Close()
	a.Release()
	require.ErrorIs(t, context.Cause(a.Context()), reason)
	require.ErrorIs(t, a.Aborted(), reason)
}

// Abort with a nil reason still aborts: Wait and Aborted report ErrAborted, never success.
func TestAbortWithANilReasonIsAnAbort(t *testing.T) {
	w := New(context.Background())
	w.Add(2)
	w.Abort(nil)
	w.Seal()
	require.ErrorIs(t, w.Aborted(), ErrAborted)
	require.ErrorIs(t, w.Wait(context.Background()), ErrAborted)
}

// When New's parent ends before the window is done, Wait returns its cause, not success.
func TestWaitReportsTheParentsEnd(t *testing.T) {
	parent, cancel := context.WithCancelCause(context.Background())
	w := New(parent)
	w.Add(1)
	w.Seal()
	stop := errors.New("stopping")
	cancel(stop)
	require.ErrorIs(t, w.Wait(context.Background()), stop)
	require.NoError(t, w.Aborted())
}

// More Done calls than records, or a negative Add, would hide a later record: they panic, as
// sync.WaitGroup does.
func TestAnUnbalancedCountPanics(t *testing.T) {
	w := New(context.Background())
	require.PanicsWithValue(t, "txn: Done with no record pending", w.Done)
	require.PanicsWithValue(t, "txn: negative window count", func() { w.Add(-1) })
	w.Add(1)
	w.Done()
	w.Seal()
	require.NoError(t, w.Wait(context.Background()))
}
