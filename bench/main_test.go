package bench

import (
	"os"
	"testing"
)

func TestMain(m *testing.M) {
	if kind := os.Getenv(childEnv); kind != "" {
		os.Exit(runChild(kind)) // a consumer process started by a memory benchmark
	}
	code := m.Run()
	closeCluster()
	os.Exit(code)
}
