package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kadm"
	"github.com/twmb/franz-go/pkg/kgo"
)

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	var err error
	switch os.Args[1] {
	case "ports":
		err = ports(os.Args[2:])
	case "ready":
		err = ready(os.Args[2:])
	default:
		usage()
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "realkafka:", err)
		os.Exit(1)
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: realkafka ports N | realkafka ready -n N -timeout D host:port,...")
	os.Exit(2)
}

// ports prints n distinct free loopback ports. They are free when printed; the caller binds them
// soon after, and run.sh retries a start that lost the race.
func ports(args []string) error {
	if len(args) != 1 {
		usage()
	}
	n, err := strconv.Atoi(args[0])
	if err != nil || n < 1 {
		return fmt.Errorf("ports: bad count %q", args[0])
	}
	var ls []net.Listener
	defer func() {
		for _, l := range ls {
			l.Close()
		}
	}()
	for range n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return err
		}
		ls = append(ls, l) // held until all are picked, so they are distinct
		fmt.Println(l.Addr().(*net.TCPAddr).Port)
	}
	return nil
}

func ready(args []string) error {
	fs := flag.NewFlagSet("ready", flag.ExitOnError)
	n := fs.Int("n", 1, "how many brokers must answer")
	timeout := fs.Duration("timeout", 2*time.Minute, "give up after this long")
	fs.Parse(args)
	if fs.NArg() != 1 {
		usage()
	}
	seeds := strings.Split(fs.Arg(0), ",")
	ctx, cancel := context.WithTimeout(context.Background(), *timeout)
	defer cancel()

	cl, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer cl.Close()
	adm := kadm.NewClient(cl)

	// 1. every broker is registered and the controller answers
	var last error
	for {
		bs, err := adm.ListBrokers(ctx)
		if err == nil && len(bs) == *n {
			break
		}
		if err == nil {
			err = fmt.Errorf("%d of %d brokers registered", len(bs), *n)
		}
		last = err
		select {
		case <-ctx.Done():
			return fmt.Errorf("brokers not ready: %w", last)
		case <-time.After(200 * time.Millisecond):
		}
	}

	// 2. a topic with one partition per broker (replication: the brokers' default), produced to
	// in a transaction (creates __transaction_state), its offsets committed by a group (creates
	// __consumer_offsets), then deleted
	topic := "tidemark-realkafka-warmup-" + strconv.FormatInt(time.Now().UnixNano(), 36)
	if err := retry(ctx, "create the warm-up topic", func() error {
		resp, err := adm.CreateTopic(ctx, int32(*n), -1, nil, topic)
		if err == nil {
			err = resp.Err
		}
		if err != nil && strings.Contains(err.Error(), "TOPIC_ALREADY_EXISTS") {
			return nil
		}
		return err
	}); err != nil {
		return err
	}
	defer func() {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer dcancel()
		_, _ = adm.DeleteTopics(dctx, topic)
	}()

	tx, err := kgo.NewClient(kgo.SeedBrokers(seeds...), kgo.TransactionalID(topic),
		kgo.DefaultProduceTopic(topic), kgo.MetadataMinAge(100*time.Millisecond))
	if err != nil {
		return err
	}
	defer tx.Close()
	if err := retry(ctx, "produce in a transaction", func() error {
		if err := tx.BeginTransaction(); err != nil {
			return err
		}
		for p := range int32(*n) {
			if err := tx.ProduceSync(ctx, &kgo.Record{Partition: p, Value: []byte("warm-up")}).FirstErr(); err != nil {
				_ = tx.EndTransaction(ctx, kgo.TryAbort)
				return err
			}
		}
		return tx.EndTransaction(ctx, kgo.TryCommit)
	}); err != nil {
		return err
	}

	if err := retry(ctx, "commit a group's offsets", func() error {
		os := kadm.Offsets{}
		for p := range int32(*n) {
			os.AddOffset(topic, p, 1, -1)
		}
		return adm.CommitAllOffsets(ctx, topic, os)
	}); err != nil {
		return err
	}
	_, _ = adm.DeleteGroups(ctx, topic)
	return nil
}

// retry calls fn until it succeeds or ctx ends.
func retry(ctx context.Context, what string, fn func() error) error {
	var last error
	for {
		if last = fn(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%s: %w", what, errors.Join(last, ctx.Err()))
		case <-time.After(250 * time.Millisecond):
		}
	}
}
