//go:build !unix

package cputime

import "time"

// Process is unknown here: ok is always false.
func Process() (cpu time.Duration, ok bool) { return 0, false }
