package runtime

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kerr"
)

var (
	errShutdownBound = errors.New("tidemark: shutdown bound passed")
	errStopped       = errors.New("tidemark: app stopped") // the cause once Shutdown has finished
)

// Shutdown stops the App in the order of DESIGN §3.7: stop polling (a Transactional subscription
// ends its window: its barrier is bounded by ctx and WindowTimeout, and past either the window
// aborts and its records are read again); drain the running handlers (bounded by ctx; past it their
// contexts are cancelled); flush the producer; final marks and commit (with its own 5s bound, run
// even when ctx is already done); leave the group (CloseAllowingRebalance). It returns the joined
// errors of those steps (a Transactional last window that did not commit, ctx's error and its
// cause, if it has one, wrapped when the drain's bound passed, ErrUnflushed, failed commits) and
// the error that failed the App while it shut down, if one did (ErrInstanceFenced for a fence
// learnt while the handlers drained, say; the App is Failed), once every goroutine the App started
// has returned (as Run says of franz-go's); a handler that ignores its cancelled ctx delays it. So
// a handler (or an Observer method) must not call Shutdown and wait for it: Shutdown would wait for
// that handler's own lane, forever; start it in a goroutine (go app.Shutdown(ctx)) and return.
// Later and concurrent calls wait for the first one and return its result (or ctx's error if ctx
// ends first): after a fatal error, which runs the first shutdown itself, that result does not
// include the fatal error (a *PanicError, say): State and Run report it. A nil ctx panics, as in
// Start, before the App changes state.
func (a *App) Shutdown(ctx context.Context) error {
	mustCtx(ctx, "Shutdown")
	return a.shutdown(ctx, callerUser)
}

// A caller says who runs a shutdown.
type caller uint8

const (
	callerUser       caller = iota // Shutdown, or Run
	callerSupervisor               // a fatal error
	callerStart                    // a failed Start
)

func (a *App) shutdown(ctx context.Context, by caller) error {
	a.mu.Lock()
	first := !a.shutdownStarted.Load()
	if first { // under mu with the state: a Start that has not begun sees it and returns ErrClosed
		a.shutdownStarted.Store(true)
		if a.state != StateFailed {
			a.state = StateShuttingDown
		}
	}
	starting := a.started && by != callerStart
	a.mu.Unlock()
	if !first {
		if by != callerUser {
			// A shutdown is under way: it waits for the supervisor to return, and for Start.
			return nil
		}
		select {
		case <-a.stopped:
			<-a.supDoneOrNil() // the supervisor returns right after a shutdown it ran
			return errors.Join(a.shutdownErr, a.failedWhileStopping)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	close(a.stopping) // a running Start ends (ErrClosed)
	if starting {
		<-a.startDone // then every consumer it made is in a.consumers, and none is being started
	}
	failed := a.fatalError() != nil
	a.shutdownErr = a.stopAll(ctx)
	if by != callerSupervisor { // it returns once stopping is closed, unless it runs the shutdown
		<-a.supDoneOrNil()
	}
	switch {
	case a.fatalError() == nil:
		a.setState(StateStopped, nil)
	case !failed: // a fence learnt while the handlers drained, say: this Shutdown did not end cleanly
		a.failedWhileStopping = a.fatalError()
	}
	close(a.stopped)
	return errors.Join(a.shutdownErr, a.failedWhileStopping)
}

// supDoneOrNil returns the supervisor's done channel, or a closed one if it never started.
func (a *App) supDoneOrNil() <-chan struct{} {
	a.mu.Lock()
	started := a.supervising
	a.mu.Unlock()
	if !started {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	return a.supDone
}

func (a *App) stopAll(ctx context.Context) error {
	a.mu.Lock()
	cs := a.consumers
	a.mu.Unlock()
	// 1. fetch nothing new; a Transactional subscription ends its window (a barrier bounded by ctx
	// and WindowTimeout, then End)
	waits := make([]func() error, len(cs))
	for i, c := range cs { // every poll loop stops before any is waited for
		waits[i] = c.stopPolling(ctx)
	}
	var stopErrs []error
	for _, wait := range waits {
		stopErrs = append(stopErrs, wait())
	}
	// 2. drain running handlers, bounded by ctx; only then are handler contexts cancelled
	var drainErr error
	for _, c := range cs {
		c.d.stop()
	}
	for _, c := range cs {
		if err := c.d.waitIdle(ctx, nil); err != nil {
			drainErr = fmt.Errorf("tidemark: drain: %w", ctxError(ctx))
			for _, c := range cs {
				c.cutWork(errShutdownBound)
			}
			break
		}
	}
	// 3. flush the producer (FlushTimeout): replies and publishes are acknowledged first
	flushErr := a.prod.close()
	// 4. final marks and commit, with their own bound, once the committer has stopped: a periodic
	// commit of manual partitions must not take the positions the final one commits
	var errs []error
	for _, c := range cs {
		close(c.stopComm)
		if c.commDone != nil {
			<-c.commDone // bounded: a periodic commit has its own 5 s bound
		}
	}
	for _, c := range cs {
		cctx, cancel := commitContext(context.WithoutCancel(ctx))
		c.finalStarted.Store(true)
		c.finalMarks(c.d.owned())
		err := c.commitMarked(cctx)
		fenced := errors.Is(err, kerr.FencedInstanceID)
		switch {
		case fenced: // since the last heartbeat: what the App fails for, and Shutdown returns
			if ferr := c.instanceFenced(c.cl, err); a.fatalError() != ferr {
				errs = append(errs, ferr) // it had failed for something else before
			}
		case err != nil:
			errs = append(errs, fmt.Errorf("tidemark: %s: final commit: %w", c.sub, err))
		}
		// Leaving the group commits once more only after a commit that failed before its bound
		// (a refusal), not fenced: one that passed its bound would pay it twice (onRevoked).
		c.committedFinal.Store(err == nil || cctx.Err() != nil || fenced)
		close(c.finalDone)
		cancel()
	}
	// 5. leave the group, then wait for every goroutine
	for _, c := range cs {
		c.closing.Store(true)
		if c.sess != nil {
			c.sess.CloseAllowingRebalance()
		} else {
			c.cl.CloseAllowingRebalance()
		}
		c.wg.Wait()
		c.cutWork(errStopped) // a no-op once the drain's bound has passed (errShutdownBound)
	}
	return errors.Join(append(append(stopErrs, drainErr, flushErr), errs...)...)
}

// ctxError returns the error of ctx, which has ended, such that errors.Is finds both ctx.Err()
// (context.Canceled or context.DeadlineExceeded) and its cause (a ctx of context.WithTimeoutCause
// or WithCancelCause): the cause if it wraps ctx.Err() already, else both.
func ctxError(ctx context.Context) error {
	err, cause := ctx.Err(), context.Cause(ctx)
	switch {
	case cause == nil || cause == err:
		return err
	case errors.Is(cause, err):
		return cause
	}
	return fmt.Errorf("%w: %w", err, cause)
}

// stopPolling stops the poll loop and returns wait, which waits for it to return. A Transactional
// poll loop first ends its window: once ctx (Shutdown's) has ended, its barrier stops waiting and
// the window aborts (waitBarrier). wait's error says when that window aborted because its barrier
// did not finish (wrapping ctx's cause, or errWindowStalled) or its End failed; nil otherwise (a
// window aborted by a rebalance or a retry is read again as in any window).
func (c *consumer) stopPolling(ctx context.Context) (wait func() error) {
	if c.stopPoll == nil {
		return func() error { return nil }
	}
	stop := context.AfterFunc(ctx, func() { c.cutBarrier(errShutdownBound) })
	c.stopPoll()
	return func() error {
		defer stop()
		<-c.pollDone
		var err error
		switch {
		case errors.Is(c.lastAbort, errShutdownBound):
			err = fmt.Errorf("tidemark: %s: the last window aborted (its records are read again): %w", c.sub, ctxError(ctx))
		case errors.Is(c.lastAbort, errWindowStalled):
			err = fmt.Errorf("tidemark: %s: the last window aborted (its records are read again): %w", c.sub, c.lastAbort)
		}
		if c.lastEnd != nil && !errors.Is(c.lastEnd, kerr.ProducerFenced) { // fenced: the newer producer aborted it, and the App failed for that
			err = errors.Join(err, fmt.Errorf("tidemark: %s: the last window's transaction did not end (its records are read again; "+
				"one that could not be aborted either stays open, holding read_committed readers back until its timeout): %w", c.sub, c.lastEnd))
		}
		return err
	}
}

// waitPatternReady returns once the subscription has an assignment, or once metadata has loaded
// and no topic matches the pattern yet (DESIGN §3.10).
func (c *consumer) waitPatternReady(ctx context.Context) error {
	re := regexp.MustCompile(c.sub.pattern) // validated by Start
	adm := kadm.NewClient(c.cl)             // not closed: closing it would close c.cl
	for {
		select {
		case <-c.ready:
			return nil
		default:
		}
		topics, err := adm.ListTopics(ctx)
		if err == nil {
			matched := false
			for _, t := range topics.Names() {
				matched = matched || re.MatchString(t)
			}
			if !matched {
				return nil
			}
		}
		select {
		case <-c.ready:
			return nil
		case err := <-c.denied:
			return deniedErr(c.group, err)
		case <-ctx.Done():
			return fmt.Errorf("no assignment from group %q: %w", c.group, context.Cause(ctx))
		case <-time.After(50 * time.Millisecond):
		}
	}
}
