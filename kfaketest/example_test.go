package kfaketest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// A program's cluster (Start; a test's is New, closed in t.Cleanup): produce to a partition, read
// the topic back, and see what a transaction leaves in it. The aborted transaction's records and
// both transactions' markers take offsets, so the high watermark is past the last record read.
func ExampleStart() {
	c, err := kfaketest.Start(kfaketest.Topic("payouts", 2))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	recs, err := c.ProduceValuesContext(ctx, "payouts", 1, "p1", "p2")
	if err != nil {
		panic(err)
	}
	fmt.Println("produced at offsets", recs[0].Offset, recs[1].Offset, "of partition", recs[0].Partition)
	_, err = c.ProduceTxnContext(ctx, "tx", true, &kgo.Record{Topic: "payouts", Value: []byte("p3")})
	if err != nil {
		panic(err)
	}
	_, err = c.ProduceTxnContext(ctx, "tx", false, &kgo.Record{Topic: "payouts", Value: []byte("never")})
	if err != nil {
		panic(err)
	}

	committed, err := c.ReadAllContext(ctx, "payouts", true)
	if err != nil {
		panic(err)
	}
	for _, r := range committed {
		fmt.Printf("read_committed: %s at %d/%d\n", r.Value, r.Partition, r.Offset)
	}
	hw, err := c.HighWatermarksContext(ctx, "payouts")
	if err != nil {
		panic(err)
	}
	fmt.Println("high watermarks:", hw)
	// Output:
	// produced at offsets 0 1 of partition 1
	// read_committed: p3 at 0/0
	// read_committed: p1 at 1/0
	// read_committed: p2 at 1/1
	// high watermarks: map[0:4 1:2]
}

// A consumer group's commits: a franz-go consumer reads the topic and commits, WaitCommittedContext
// waits until the group holds the offsets wanted, and the commit log shows each commit request the
// cluster received, with the member and generation it carried.
func ExampleCluster_CommitLog() {
	c, err := kfaketest.Start(kfaketest.Topic("orders", 1))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := c.ProduceValuesContext(ctx, "orders", 0, "o1", "o2", "o3"); err != nil {
		panic(err)
	}

	cl, err := kgo.NewClient(append(c.ClientOpts(), kgo.ConsumerGroup("billing"), kgo.ConsumeTopics("orders"),
		kgo.DisableAutoCommit())...)
	if err != nil {
		panic(err)
	}
	defer cl.Close()
	for n := 0; n < 3; {
		fs := cl.PollFetches(ctx)
		if err := fs.Err0(); err != nil {
			panic(err)
		}
		n += fs.NumRecords()
	}
	if err := cl.CommitUncommittedOffsets(ctx); err != nil {
		panic(err)
	}

	if err := c.WaitCommittedContext(ctx, "billing", "orders", map[int32]int64{0: 3}); err != nil {
		panic(err)
	}
	for _, cm := range c.CommitLog().Of("billing", "orders", 0) {
		fmt.Printf("commit %d: %s/%d at %d, a member of generation %d: %t\n",
			cm.Seq, cm.Topic, cm.Partition, cm.Offset, cm.Generation, cm.Member != "")
	}
	// Output:
	// commit 0: orders/0 at 3, a member of generation 1: true
}

// An injected fault: the next produce request to a topic fails with a non-retriable error, which
// the producer returns; the one after it goes through. The handle counts what it failed.
func ExampleCluster_FailProduce() {
	c, err := kfaketest.Start(kfaketest.Topic("ledger", 1))
	if err != nil {
		panic(err)
	}
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	fault := c.FailProduce("ledger", 1, kerr.InvalidRecord)
	_, err = c.ProduceValuesContext(ctx, "ledger", 0, "first")
	fmt.Println("first produce fails:", errors.Is(err, kerr.InvalidRecord), "hits:", fault.Hits())
	recs, err := c.ProduceValuesContext(ctx, "ledger", 0, "second")
	if err != nil {
		panic(err)
	}
	fmt.Println("second produce at offset", recs[0].Offset)
	// Output:
	// first produce fails: true hits: 1
	// second produce at offset 0
}
