package kfaketest

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// A Process is a child consumer started by Spawn: the test binary re-executed to run only the
// spawning test, in which Child reports true. It is killed with SIGKILL (no cleanup code runs in
// it, DESIGN §5) and restarted; each start is a run, numbered from 1. Its methods take the
// parent's t and are safe for concurrent use.
type Process struct {
	c          *Cluster
	pattern    string // -test.run value selecting the spawning test
	args       map[string]string
	instanceID string
	dir        string // event log and outputs
	events     string // event log path

	mu      sync.Mutex
	timeout time.Duration
	run     int
	cmd     *exec.Cmd
	exited  chan struct{} // closed when the current run's process has been waited for
	exitErr error         // the current run's exit error, once exited is closed

	noteMu    sync.Mutex
	noteLog   *EventLog // the parent's handle on the event log, for Note; closed by stop
	noteEnded bool      // stop ran: Note does nothing
}

// Spawn starts run 1 of a child process for the test t, which must be the test (or subtest)
// that calls Child first. args reach the child as ChildEnv.Args. The child's stdout and stderr go
// to a file per run (Output returns them; the test log shows them if the test fails). t.Cleanup
// kills the child and waits for it. It fails the test if the child cannot start, or if it is
// called in a child (the test did not call Child first: each child would spawn another).
func (c *Cluster) Spawn(t testing.TB, args map[string]string) *Process {
	t.Helper()
	if _, child := os.LookupEnv(childEnvVar); child {
		t.Fatalf("kfaketest: Spawn called in a child process: call kfaketest.Child first in the test, " +
			"and run the consumer and return when it reports true (else every child spawns another)")
	}
	c.mu.Lock()
	c.spawned++
	n := c.spawned
	c.mu.Unlock()
	dir := t.TempDir()
	p := &Process{
		c:          c,
		pattern:    runPattern(t.Name()),
		args:       args,
		instanceID: fmt.Sprintf("%s-%d", sanitize(t.Name()), n),
		dir:        dir,
		events:     filepath.Join(dir, "events.jsonl"),
		timeout:    WaitTimeout,
	}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() {
			t.Logf("kfaketest: child output (%s):\n%s", p.instanceID, p.Output())
		}
	})
	if err := p.start(); err != nil {
		t.Fatalf("kfaketest: Spawn: %v", err)
	}
	return p
}

// runPattern builds a -test.run value matching exactly the test named name, subtests included:
// each "/"-separated element is quoted and anchored.
func runPattern(name string) string {
	parts := strings.Split(name, "/")
	for i, s := range parts {
		parts[i] = "^" + regexp.QuoteMeta(s) + "$"
	}
	return strings.Join(parts, "/")
}

var unsafeChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

func sanitize(name string) string { return unsafeChars.ReplaceAllString(name, "_") }

// SetTimeout sets the deadline of the Process's waits (WaitEvents, KillAfter, WaitExit),
// overriding the default WaitTimeout (30s).
func (p *Process) SetTimeout(d time.Duration) {
	p.mu.Lock()
	p.timeout = d
	p.mu.Unlock()
}

// InstanceID returns the static member id every run of this Process gets as ChildEnv.InstanceID:
// the test's name and the Spawn's number within its cluster.
func (p *Process) InstanceID() string { return p.instanceID }

// Run returns the number of the current (or last) run: 1 after Spawn, +1 per Restart.
func (p *Process) Run() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.run
}

func (p *Process) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.run++
	spec, err := json.Marshal(childSpec{
		Brokers:    p.c.Addrs(),
		Args:       p.args,
		Run:        p.run,
		InstanceID: p.instanceID,
		EventsPath: p.events,
		Connected:  p.c.Connected(),
		TermPath:   p.termPath(p.run),
	})
	if err != nil {
		return err
	}
	out, err := os.Create(filepath.Join(p.dir, fmt.Sprintf("run-%d.log", p.run)))
	if err != nil {
		return err
	}
	defer out.Close() // the child has its own copy once started
	cmd := exec.Command(os.Args[0], "-test.run="+p.pattern, "-test.count=1")
	cmd.Env = append(os.Environ(), childEnvVar+"="+string(spec), goraceEnv())
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = sysProcAttr()
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("run %d: %w", p.run, err)
	}
	exited := make(chan struct{})
	p.cmd, p.exited, p.exitErr = cmd, exited, nil
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.exitErr = err
		p.mu.Unlock()
		close(exited)
	}()
	return nil
}

// goraceEnv returns GORACE with atexit_sleep_ms=0 added: a race-enabled binary otherwise sleeps
// 1s before exiting, which every child that returns on its own would pay.
func goraceEnv() string {
	v := os.Getenv("GORACE")
	switch {
	case v == "":
		v = "atexit_sleep_ms=0"
	case !strings.Contains(v, "atexit_sleep_ms"):
		v += " atexit_sleep_ms=0"
	}
	return "GORACE=" + v
}

// running reports whether the current run has not exited yet.
func (p *Process) running() bool {
	p.mu.Lock()
	exited := p.exited
	p.mu.Unlock()
	select {
	case <-exited:
		return false
	default:
		return true
	}
}

// Events returns every event logged so far, by all runs, in order (Seq 0, 1, ...). It returns
// nil if the log cannot be read.
func (p *Process) Events() []Event {
	evs, _ := readEvents(p.events)
	return evs
}

// WaitEvents waits until cond returns true for Events, looking again every 10ms. It fails the
// test after the Process's timeout (WaitTimeout unless SetTimeout), or as soon as the current run
// exits without cond holding, naming the last events and the exit status. cond must not retain
// or modify its argument.
func (p *Process) WaitEvents(t testing.TB, cond func([]Event) bool) {
	t.Helper()
	p.waitEvents(t, "WaitEvents", cond)
}

// waitEvents is WaitEvents, its failures named by what, the caller's name.
func (p *Process) waitEvents(t testing.TB, what string, cond func([]Event) bool) {
	t.Helper()
	p.mu.Lock()
	timeout, exited := p.timeout, p.exited
	p.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for {
		evs, err := readEvents(p.events)
		if err != nil {
			t.Fatalf("kfaketest: %s: %v", what, err)
		}
		if cond(evs) {
			return
		}
		select {
		case <-exited:
			if evs, _ := readEvents(p.events); cond(evs) {
				return
			}
			t.Fatalf("kfaketest: %s: run %d exited (%v) before the condition held; last events: %s",
				what, p.Run(), p.exitStatus(), tailEvents(p.Events(), 20))
		case <-deadline.C:
			t.Fatalf("kfaketest: %s: condition not met after %v; last events: %s",
				what, timeout, tailEvents(evs, 20))
		case <-tick.C:
		}
	}
}

// KillAfter waits (as WaitEvents) until the current run has logged n EventReturn events, then
// kills it with SIGKILL and waits for it to exit. The child keeps running between the n-th
// return and the kill, so it may handle more: Events says exactly what it did.
func (p *Process) KillAfter(t testing.TB, n int) {
	t.Helper()
	run := p.Run()
	p.waitEvents(t, fmt.Sprintf("KillAfter(%d returns)", n), func(evs []Event) bool {
		k := 0
		for _, e := range evs {
			if e.Run == run && e.Kind == EventReturn {
				k++
			}
		}
		return k >= n
	})
	p.Kill(t)
}

// Kill sends SIGKILL to the current run and waits until it has exited. Killing a run that
// already exited does nothing. It fails the test if the process does not exit within the
// Process's timeout.
func (p *Process) Kill(t testing.TB) {
	t.Helper()
	if err := p.kill(); err != nil {
		t.Fatalf("kfaketest: Kill: %v", err)
	}
}

func (p *Process) kill() error {
	p.mu.Lock()
	cmd, exited, timeout := p.cmd, p.exited, p.timeout
	if cmd == nil {
		p.mu.Unlock()
		return nil
	}
	select {
	case <-exited:
		p.mu.Unlock()
		return nil
	default:
	}
	err := cmd.Process.Kill()
	p.mu.Unlock()
	if err != nil && !errors.Is(err, os.ErrProcessDone) {
		return fmt.Errorf("run %d: %w", p.Run(), err)
	}
	select {
	case <-exited:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("run %d did not exit %v after SIGKILL", p.Run(), timeout)
	}
}

// stop kills the current run and waits for it, and closes the parent's note handle, for
// t.Cleanup.
func (p *Process) stop() {
	if p.kill() != nil {
		p.mu.Lock()
		exited := p.exited
		p.mu.Unlock()
		<-exited // SIGKILL cannot be ignored: the process goes, and the waiter with it
	}
	p.noteMu.Lock()
	defer p.noteMu.Unlock()
	p.noteEnded = true
	if p.noteLog != nil {
		p.noteLog.f.Close()
		p.noteLog = nil
	}
}

// termPath is where run's ChildEnv.Context says it handles SIGTERM.
func (p *Process) termPath(run int) string {
	return filepath.Join(p.dir, fmt.Sprintf("run-%d.term", run))
}

// Terminate asks the current run to stop gracefully: once the child has called
// ChildEnv.Context (it waits for that), it sends SIGTERM, which cancels that context, and waits
// for the run to exit on its own. Both waits share the Process's timeout. It returns the run's
// exit error: nil for status 0. Terminating a run that already exited returns its exit error. It
// fails the test if the run never calls Context or does not exit in time (it is then killed),
// or cannot be signalled.
func (p *Process) Terminate(t testing.TB) error {
	t.Helper()
	p.mu.Lock()
	cmd, exited, timeout, run := p.cmd, p.exited, p.timeout, p.run
	p.mu.Unlock()
	deadline := time.NewTimer(timeout)
	defer deadline.Stop()
	tick := time.NewTicker(pollInterval)
	defer tick.Stop()
	for ready := false; !ready; {
		if _, err := os.Stat(p.termPath(run)); err == nil {
			break
		}
		select {
		case <-exited:
			ready = true
		case <-deadline.C:
			_ = p.kill()
			t.Fatalf("kfaketest: Terminate: run %d did not call ChildEnv.Context within %v; killed it; last events: %s",
				run, timeout, tailEvents(p.Events(), 20))
		case <-tick.C:
		}
	}
	select {
	case <-exited:
	default:
		if err := signalTerm(cmd.Process); err != nil && !errors.Is(err, os.ErrProcessDone) {
			t.Fatalf("kfaketest: Terminate: run %d: %v", run, err)
		}
		select {
		case <-exited:
		case <-deadline.C:
			_ = p.kill()
			t.Fatalf("kfaketest: Terminate: run %d still running %v after SIGTERM; killed it; last events: %s",
				run, timeout, tailEvents(p.Events(), 20))
		}
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

// Note appends an EventNote to the Process's event log from the parent, with Run 0: a marker
// that orders something the parent saw (a commit, from CommitLog.OnCommit) against the child's
// events. The child's events are written before their calls return, so every event of the child
// that happened before the parent's observation comes before the note. Note may be called from
// any goroutine; it panics if the log cannot be written, and does nothing once the test's cleanup
// has stopped the Process.
func (p *Process) Note(kind, text string) {
	p.noteMu.Lock()
	defer p.noteMu.Unlock()
	if p.noteEnded {
		return
	}
	if p.noteLog == nil {
		f, err := os.OpenFile(p.events, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o600)
		if err != nil {
			panic(fmt.Sprintf("kfaketest: Process.Note: %v", err))
		}
		p.noteLog = &EventLog{f: f}
	}
	p.noteLog.Note(kind, text)
}

// Restart starts the next run with the same arguments and InstanceID. The current run must have
// exited (Kill, KillAfter or WaitExit first); otherwise, or if the child cannot start, it fails
// the test.
func (p *Process) Restart(t testing.TB) {
	t.Helper()
	if p.running() {
		t.Fatalf("kfaketest: Restart: run %d is still running; Kill it first", p.Run())
	}
	if err := p.start(); err != nil {
		t.Fatalf("kfaketest: Restart: %v", err)
	}
}

// WaitExit waits for the current run to exit on its own and returns its exit error: nil for
// status 0, an *exec.ExitError otherwise. It fails the test if the run has not exited within the
// Process's timeout.
func (p *Process) WaitExit(t testing.TB) error {
	t.Helper()
	p.mu.Lock()
	exited, timeout := p.exited, p.timeout
	p.mu.Unlock()
	select {
	case <-exited:
	case <-time.After(timeout):
		t.Fatalf("kfaketest: WaitExit: run %d still running after %v; last events: %s",
			p.Run(), timeout, tailEvents(p.Events(), 20))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exitErr
}

func (p *Process) exitStatus() string {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.exitErr == nil {
		return "status 0"
	}
	return p.exitErr.Error()
}

// Output returns what every run wrote to stdout and stderr so far, each run under a header.
func (p *Process) Output() string {
	var b strings.Builder
	for run := 1; run <= p.Run(); run++ {
		out, err := os.ReadFile(filepath.Join(p.dir, fmt.Sprintf("run-%d.log", run)))
		if err != nil {
			fmt.Fprintf(&b, "--- run %d: %v\n", run, err)
			continue
		}
		fmt.Fprintf(&b, "--- run %d\n%s", run, out)
	}
	return b.String()
}

func tailEvents(evs []Event, n int) string {
	if len(evs) > n {
		return fmt.Sprintf("(%d earlier) %+v", len(evs)-n, evs[len(evs)-n:])
	}
	return fmt.Sprintf("%+v", evs)
}
