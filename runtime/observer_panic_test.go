package runtime_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// panicObserver panics in Settled, which a lane calls after a handler returned.
type panicObserver struct{ runtime.NopObserver }

func (panicObserver) Settled(runtime.SettledEvent) { panic("observer panicked in Settled") }

const observerPanicChild = "TIDEMARK_OBSERVER_PANIC_CHILD"

// An Observer that panics on a lane ends the process with its own panic (operations.md: a panic in
// an Observer is not recovered), and nothing says the handler called runtime.Goexit: the lane's
// clean-up took the unwinding panic for a handler's Goexit, logged that at Error, reported an
// OutcomePanic to the Observer (which panicked again) and finished the take (helper-80). The App
// runs in a child process, which the panic ends.
func TestAnObserverPanicOnALaneEndsTheProcessAsItsPanic(t *testing.T) {
	if os.Getenv(observerPanicChild) != "" {
		runObserverPanicChild(t)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, os.Args[0], "-test.run=^TestAnObserverPanicOnALaneEndsTheProcessAsItsPanic$",
		"-test.count=1", "-test.timeout=1m")
	cmd.Env = append(os.Environ(), observerPanicChild+"=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "the child should have died of the panic:\n%s", out)
	require.Contains(t, string(out), "panic: observer panicked in Settled")
	require.NotContains(t, string(out), "runtime.Goexit", "the panic was reported as a handler's Goexit")
	require.NotContains(t, string(out), "CHILD-SURVIVED")
}

func runObserverPanicChild(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a")
	app := runtime.New(appOpts(c, runtime.Observe(panicObserver{}),
		runtime.Logger(slog.New(slog.NewTextHandler(os.Stderr, nil))))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil }))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := app.Run(ctx)
	fmt.Fprintf(os.Stderr, "CHILD-SURVIVED: %v\n", err)
}
