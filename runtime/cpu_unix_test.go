//go:build unix

package runtime

import (
	"syscall"
	"time"
)

// processCPU returns the CPU time (user + system) this process has used so far, every goroutine
// of it, the in-process cluster's included; ok is false where the OS does not say.
func processCPU() (cpu time.Duration, ok bool) {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}
