package txn

import (
	"context"
	"errors"
	"sync"
)

// ErrClosed is returned by Window.Produce once the window has been closed: its transaction is
// ending or has ended, so nothing more may be produced into it.
var ErrClosed = errors.New("tidemark: transaction window closed")

// ErrAborted is the reason of a window aborted with a nil reason.
var ErrAborted = errors.New("tidemark: transaction window aborted")

// A Window is one transaction's records: how many are not done yet, whether it was aborted and
// why, and a guard that keeps produces out of it once it is closed. The zero value is not usable;
// create one with New. All methods are safe from any goroutine.
type Window struct {
	ctx    context.Context
	cancel context.CancelCauseFunc

	guard  sync.RWMutex // read-held around a produce; write-held to close
	closed bool

	mu      sync.Mutex
	pending int
	sealed  bool
	idle    chan struct{} // closed once sealed with nothing pending
	aborted error
}

// New returns an open window whose Context is a child of parent.
func New(parent context.Context) *Window {
	ctx, cancel := context.WithCancelCause(parent)
	return &Window{ctx: ctx, cancel: cancel, idle: make(chan struct{})}
}

// Context returns the window's context: the handlers' ctx, cancelled when the window aborts or
// is released.
func (w *Window) Context() context.Context { return w.ctx }

// Add counts n more records into the window. It panics if the window is sealed, or if n would
// make the count negative (as sync.WaitGroup does: a count that hides records is a bug).
func (w *Window) Add(n int) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.sealed {
		panic("txn: Add on a sealed window")
	}
	if w.pending+n < 0 {
		panic("txn: negative window count")
	}
	w.pending += n
}

// Done marks one record of the window done (settled with its outputs produced, or dropped). It
// panics if no record is pending.
func (w *Window) Done() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.pending == 0 {
		panic("txn: Done with no record pending")
	}
	w.pending--
	w.maybeIdle()
}

// Pending returns how many records of the window are not done.
func (w *Window) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.pending
}

// Seal ends the window's polling: no record is added after it, and Wait can return.
func (w *Window) Seal() {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.sealed = true
	w.maybeIdle()
}

func (w *Window) maybeIdle() {
	if w.sealed && w.pending == 0 {
		select {
		case <-w.idle:
		default:
			close(w.idle)
		}
	}
}

// Wait returns nil once the window is sealed and every record is done, the abort reason once it
// is aborted, the cause of New's parent ctx once that ends first, or ctx's cause. A window already
// done wins over a ctx already ended.
func (w *Window) Wait(ctx context.Context) error {
	select {
	case <-w.idle:
		return w.Aborted()
	case <-w.ctx.Done():
		if err := w.Aborted(); err != nil {
			return err
		}
		select {
		case <-w.idle:
			return nil
		default:
			return context.Cause(w.ctx) // the parent ended: the window is not done
		}
	case <-ctx.Done():
		select {
		case <-w.idle:
			return w.Aborted()
		default:
			return context.Cause(ctx)
		}
	}
}

// Abort marks the window aborted for reason (the first reason wins; nil is taken as ErrAborted)
// and cancels its context.
func (w *Window) Abort(reason error) {
	if reason == nil {
		reason = ErrAborted
	}
	w.mu.Lock()
	if w.aborted == nil {
		w.aborted = reason
	}
	w.mu.Unlock()
	w.cancel(reason)
}

// Aborted returns the reason the window was aborted, or nil.
func (w *Window) Aborted() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.aborted
}

// Produce runs produce (which must not block for long: it hands a record to the client) unless
// the window is closed, in which case it returns ErrClosed and runs nothing.
func (w *Window) Produce(produce func()) error {
	w.guard.RLock()
	defer w.guard.RUnlock()
	if w.closed {
		return ErrClosed
	}
	produce()
	return nil
}

// Close refuses every later Produce and waits for the ones under way to hand their records over.
// After Close the transaction can end without a produce racing it.
func (w *Window) Close() {
	w.guard.Lock()
	defer w.guard.Unlock()
	w.closed = true
}

// Release ends the window's context once its transaction has ended, committed or aborted: it is
// cancelled with ErrClosed as its cause, unless an abort cancelled it already. Until then the
// context stays registered with New's parent, so a loop that opens a window per transaction and
// never releases them holds one context per transaction until the parent ends. Call it after
// Close and the transaction's end; handlers are done with the context by then.
func (w *Window) Release() { w.cancel(ErrClosed) }

// Closed reports whether Close was called.
func (w *Window) Closed() bool {
	w.guard.RLock()
	defer w.guard.RUnlock()
	return w.closed
}
