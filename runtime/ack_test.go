package runtime_test

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/dlq"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
)

// Acking everything and stopping gracefully commits the high watermark of every partition, and a
// restarted App receives nothing but what was produced after the restart (DESIGN §3.2, §3.7).
func TestAckAllCommitsHighWatermarkAndRestartSeesOnlyNewRecords(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		for _, parts := range []int32{1, 3} {
			t.Run(fmt.Sprintf("%s/%d partitions", mode, parts), func(t *testing.T) {
				c := kfaketest.New(t, kfaketest.Topic("in", parts))
				want := map[int32]int64{}
				var produced []string
				for p := range parts {
					var vs []string
					for i := range 10 {
						vs = append(vs, fmt.Sprintf("p%d-%d", p, i))
					}
					c.ProduceValues(t, "in", p, vs...)
					produced = append(produced, vs...)
					want[p] = 10
				}
				sub := runtime.Topic("in").Group("g").Commit(mode)

				var first seen
				app := runtime.New(appOpts(c)...)
				runtime.Handle(app, sub, first.handler(), runtime.Workers(3))
				start(t, app)
				c.WaitCommitted(t, "g", "in", want)
				stop(t, app)
				require.Equal(t, want, c.Committed(t, "g", "in"))
				got := first.values()
				sort.Strings(got)
				sort.Strings(produced)
				require.Equal(t, produced, got, "every record handled exactly once")

				var second seen
				app2 := runtime.New(appOpts(c)...)
				runtime.Handle(app2, sub, second.handler())
				start(t, app2)
				var sentinels []string
				for p := range parts {
					v := fmt.Sprintf("sentinel-%d", p)
					c.ProduceValues(t, "in", p, v)
					sentinels = append(sentinels, v)
				}
				eventually(t, func() bool { return second.len() >= int(parts) }, "sentinels not handled")
				got = second.values()
				sort.Strings(got)
				require.Equal(t, sentinels, got, "a restarted App sees only the sentinels")
			})
		}
	}
}

// A handler that publishes the record it was given (franz-go then sets its Topic, Partition and
// Offset to the output's) does not move its partition's committed offset: the runtime reads the
// position it commits before the handler runs. Auto marked the output's offset + 1 (here 53 on a
// 3-record input: every record after it would have been skipped), and batches likewise.
func TestAHandlerThatPublishesItsRecordCommitsTheInputsOffset(t *testing.T) {
	for _, batch := range []bool{false, true} {
		t.Run(fmt.Sprintf("batch=%v", batch), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1))
			c.ProduceValues(t, "out", 0, numbered(50)...)
			c.ProduceValues(t, "in", 0, "a", "b", "c")
			app := runtime.New(appOpts(c)...)
			forward := func(ctx context.Context, d *runtime.Delivery) error {
				r := d.Record()
				r.Topic = "out" // misuse: the record is the runtime's
				return app.Publish(ctx, r)
			}
			sub := runtime.Topic("in").Group("g").Commit(runtime.Auto)
			if batch {
				runtime.HandleBatch(app, sub, 8, runtime.BatchHandlerFunc(func(ctx context.Context, ds []*runtime.Delivery) []error {
					out := make([]error, len(ds))
					for i, d := range ds {
						out[i] = forward(ctx, d)
					}
					return out
				}))
			} else {
				runtime.Handle(app, sub, runtime.HandlerFunc(forward))
			}
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
			stop(t, app)
			require.Equal(t, map[int32]int64{0: 3}, c.Committed(t, "g", "in"))
			require.Equal(t, map[int32]int64{0: 53}, c.HighWatermarks(t, "out"))
		})
	}
}

// A record its handler published (franz-go set its Topic, Partition and Offset to the output's)
// is still the input's for everything the runtime does with it afterwards: run again in place
// (Auto: its dead letter failed), its mark is the input's offset; counted in aborted Transactional
// windows, its attempts reach MaxAttempts and it is dead-lettered, with the input's provenance.
// The runtime read these from the record after the first run (helper-61): Auto committed 51 for a
// 1-record input, and the Transactional attempts stayed at 1, aborting forever.
func TestAPublishedRecordStaysTheInputsForRetriesAndDeadLetters(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Transactional("tx-fwd")} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("out", 1), kfaketest.Topic("dlq", 1))
			c.ProduceValues(t, "out", 0, numbered(50)...)
			c.ProduceValues(t, "in", 0, "a")
			opts := []runtime.HandleOption{runtime.DeadLetter("dlq"), runtime.Backoff(func(int, error) time.Duration { return 10 * time.Millisecond })}
			if mode == runtime.Auto {
				c.FailProduce("dlq", 1, kerr.InvalidRecord) // the first dead letter fails: the record runs again in place
			} else {
				opts = append(opts, runtime.MaxAttempts(3))
			}
			var attempts []int
			var mu sync.Mutex
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode), runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
				mu.Lock()
				attempts = append(attempts, d.Attempt())
				mu.Unlock()
				r := d.Record()
				if r.Topic != "in" {
					return nil // run again in place after it was published: done
				}
				r.Topic = "out" // misuse: the record is the runtime's
				if err := app.Publish(ctx, r); err != nil {
					return err
				}
				return runtime.Retry(errors.New("downstream said no"))
			}), opts...)
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})
			stop(t, app)
			mu.Lock()
			defer mu.Unlock()
			if mode == runtime.Auto {
				require.Equal(t, []int{1, 2}, attempts)
				return
			}
			require.Equal(t, []int{1, 2, 3}, attempts)
			dl := c.ReadAll(t, "dlq", true)
			require.Len(t, dl, 1)
			require.Equal(t, []string{"in"}, hv(dl[0], dlq.TopicHeader))
			require.Equal(t, []string{"0"}, hv(dl[0], dlq.OffsetHeader))
		})
	}
}
