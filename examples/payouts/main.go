package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"
)

// main parses the flags, runs the demo until every record has settled (or -timeout, or Ctrl-C)
// and exits 0 when it did, 1 otherwise.
func main() {
	var (
		cfg     config
		brokers string
		verbose bool
	)
	flag.StringVar(&brokers, "brokers", "", "comma-separated seed brokers of a real cluster to use instead of the embedded one")
	flag.BoolVar(&cfg.seed, "seed", false, "with -brokers: create the topics and produce the bundled input first")
	flag.DurationVar(&cfg.timeout, "timeout", 2*time.Minute, "give up if not every record has settled by then")
	flag.IntVar(&cfg.workers, "workers", 8, "lanes per subscription")
	flag.BoolVar(&verbose, "v", false, "log the runtime's warnings (every drop, dead letter and refused retry) to stderr")
	flag.Parse()
	if flag.NArg() > 0 {
		fmt.Fprintf(os.Stderr, "payouts: unexpected arguments %q: every setting is a flag (-h lists them)\n", flag.Args())
		os.Exit(2)
	}
	if cfg.workers < 1 || cfg.workers > 65536 { // before the input is produced (Start would refuse it)
		fmt.Fprintf(os.Stderr, "payouts: -workers %d: need 1 to 65536 lanes per subscription\n", cfg.workers)
		os.Exit(2)
	}
	if brokers != "" {
		for _, b := range strings.Split(brokers, ",") {
			if b = strings.TrimSpace(b); b != "" {
				cfg.brokers = append(cfg.brokers, b)
			}
		}
		if len(cfg.brokers) == 0 {
			fmt.Fprintf(os.Stderr, "payouts: -brokers %q names no broker\n", brokers)
			os.Exit(2)
		}
	}
	level := slog.LevelError
	if verbose {
		level = slog.LevelWarn
	}
	cfg.logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cfg.progress = isTerminal(os.Stdout)

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	context.AfterFunc(ctx, stop) // the first signal starts the shutdown; a second one ends the process
	_, err := run(ctx, cfg, os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "payouts:", err)
		os.Exit(1)
	}
}

// isTerminal reports whether f is a terminal (a character device), where a progress line may be
// rewritten in place.
func isTerminal(f *os.File) bool {
	fi, err := f.Stat()
	return err == nil && fi.Mode()&os.ModeCharDevice != 0
}
