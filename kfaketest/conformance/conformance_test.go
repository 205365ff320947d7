package conformance_test

import (
	"flag"
	"os"
	"strconv"
	"testing"

	"go.uber.org/goleak"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/kfaketest/conformance"
)

func TestMain(m *testing.M) {
	if _, child := kfaketest.Child(); child {
		os.Exit(m.Run()) // a crash-runner subprocess: it is killed, leak checks mean nothing there
	}
	goleak.VerifyTestMain(m)
}

// The conformance suite against kfake, or against the cluster in KAFKA_BROKERS when it is set.
func TestConformance(t *testing.T) {
	conformance.Run(t, conformance.FromEnv())
}

var (
	chaosN    = flag.Int("chaos.n", envInt("TIDEMARK_CHAOS_N", 3), "how many chaos seeds to run (env TIDEMARK_CHAOS_N)")
	chaosSeed = flag.Uint64("chaos.seed", uint64(envInt("TIDEMARK_CHAOS_SEED", 1)), "the first chaos seed (env TIDEMARK_CHAOS_SEED)")
)

func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil {
		return v
	}
	return def
}

// Seeded chaos runs on the crash runner (kfake only: the invariants read its commit log). make test
// runs seeds 1–3; make chaos runs 1,000 (N=, SEED=).
func TestChaos(t *testing.T) {
	conformance.Chaos(t, *chaosSeed, *chaosN)
}
