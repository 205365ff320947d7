//go:build !linux

package kfaketest

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

// sysProcAttr is nil off Linux: children are killed by the test's cleanup, but one left behind
// by a parent that died without running it keeps running until it exits on its own.
func sysProcAttr() *syscall.SysProcAttr { return nil }

// signalTerm asks a child to stop gracefully: SIGTERM where the platform has it, otherwise a
// kill (an os.Interrupt cannot be sent on Windows).
func signalTerm(p *os.Process) error {
	if err := p.Signal(syscall.SIGTERM); err != nil {
		return p.Kill()
	}
	return nil
}

// notifyTerm is signal.NotifyContext for SIGTERM.
func notifyTerm(ctx context.Context) (context.Context, context.CancelFunc) {
	return signal.NotifyContext(ctx, syscall.SIGTERM)
}
