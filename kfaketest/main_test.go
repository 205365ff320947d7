package kfaketest_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every goroutine a test starts (clusters, clients, child waiters) must be gone when the
// package's tests end. Nothing is ignored. A child process runs this too, for the one test it
// re-executes: it either returns normally (and must not leak either) or is killed.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
