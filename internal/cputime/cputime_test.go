package cputime_test

import (
	"testing"

	"github.com/tidemark-io/tidemark/internal/cputime"
)

// The process's CPU time grows while it computes, and never goes back.
func TestProcessGrowsWithWork(t *testing.T) {
	start, ok := cputime.Process()
	if !ok {
		t.Skip("no CPU time on this OS")
	}
	x := 0
	for end := start; end <= start; end, _ = cputime.Process() {
		for i := range 1_000_000 {
			x += i
		}
	}
	_ = x
}
