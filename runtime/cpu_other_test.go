//go:build !unix

package runtime

import "time"

// processCPU is unknown here: the end-to-end benchmark reports no CPU per record.
func processCPU() (time.Duration, bool) { return 0, false }
