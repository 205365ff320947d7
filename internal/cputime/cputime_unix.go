//go:build unix

package cputime

import (
	"syscall"
	"time"
)

// Process returns the CPU time (user + system, getrusage RUSAGE_SELF) the process has used so
// far, every goroutine of it; ok is false if the OS refused.
func Process() (cpu time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
