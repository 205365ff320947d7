package conformance_test

import (
	"os"
	"testing"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/kfaketest/conformance"
)

// The suite as it runs on a real cluster, through kfaketest.Connect, against a kfake cluster's
// addresses: the real-cluster path (prefixes, kadm helpers, the kfake-only skips) without a real
// cluster. It doubles the suite's time, so it runs only when TIDEMARK_CONFORMANCE_CONNECT is set.
func TestConformanceThroughConnect(t *testing.T) {
	if os.Getenv("TIDEMARK_CONFORMANCE_CONNECT") == "" {
		t.Skip("set TIDEMARK_CONFORMANCE_CONNECT=1 to run the suite through kfaketest.Connect")
	}
	if _, ok := kfaketest.Child(); ok { // the crash scenarios' children: they take the brokers from their env
		conformance.Run(t, conformance.Brokers([]string{"from-the-child-env"}))
		return
	}
	c := kfaketest.New(t)
	conformance.Run(t, conformance.Brokers(c.Addrs()))
}
