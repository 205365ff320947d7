package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

type Payout struct {
	ID          string `json:"id"`
	AmountCents int    `json:"amount_cents"`
}

// A Tracked subscription: every payout is handled at least once, a zero amount is dropped, a
// transient failure is retried in place, and the committed offset never passes an unfinished
// payout.
func Example() {
	cluster, err := kfaketest.Start(kfaketest.Topic("payouts", 1))
	if err != nil {
		panic(err)
	}
	defer cluster.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	_, err = cluster.ProduceValuesContext(ctx, "payouts", 0,
		`{"id":"p1","amount_cents":500}`, `{"id":"p2","amount_cents":0}`, `{"id":"p3","amount_cents":250}`)
	if err != nil {
		panic(err)
	}

	var paid atomic.Int64
	bankFailedOnce := false
	payOut := func(ctx context.Context, p Payout) error {
		if p.AmountCents == 0 {
			return runtime.Drop(errors.New("empty payout"))
		}
		if p.ID == "p3" && !bankFailedOnce {
			bankFailedOnce = true
			return runtime.Retry(errors.New("bank timeout"))
		}
		paid.Add(int64(p.AmountCents))
		return nil
	}

	app := runtime.New(
		runtime.Brokers(cluster.Addrs()...),
		runtime.ClientOpts(kfaketest.FastOpts()...),
		runtime.DefaultGroup("payouts"),
		runtime.Logger(slog.New(slog.NewTextHandler(io.Discard, nil))),
	)
	runtime.Handle(app, runtime.Topic("payouts").Commit(runtime.Tracked), runtime.JSON(payOut),
		runtime.Workers(4), fastBackoff)
	if err := app.Start(ctx); err != nil {
		panic(err)
	}
	if err := cluster.WaitCommittedContext(ctx, "payouts", "payouts", map[int32]int64{0: 3}); err != nil {
		panic(err)
	}
	if err := app.Shutdown(ctx); err != nil {
		panic(err)
	}
	fmt.Println("paid cents:", paid.Load())
	committed, _ := cluster.CommittedContext(ctx, "payouts", "payouts")
	fmt.Println("committed:", committed)
	// Output:
	// paid cents: 750
	// committed: map[0:3]
}
