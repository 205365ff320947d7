//go:build !linux

package kfaketest

import "syscall"

// sysProcAttr is nil off Linux: children are killed by the test's cleanup, but one left behind
// by a parent that died without running it keeps running until it exits on its own.
func sysProcAttr() *syscall.SysProcAttr { return nil }
