package kfaketest

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// sysProcAttr makes the kernel SIGKILL a child when the parent test process dies (a test
// timeout's panic, a crash), so no consumer is left running against a vanished cluster.
// Pdeathsig fires when the thread that started the child exits; the Go runtime does not end
// threads that were not locked with runtime.LockOSThread, and Spawn does not lock one.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

// signalTerm asks a child to stop gracefully.
func signalTerm(p *os.Process) error { return p.Signal(syscall.SIGTERM) }

// notifyTerm is signal.NotifyContext for SIGTERM.
func notifyTerm(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGTERM)
}
