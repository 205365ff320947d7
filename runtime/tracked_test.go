package runtime_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	goruntime "runtime"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// An out-of-order completion never commits past an unfinished record (DESIGN §3.1): with record 3
// blocked and 0..2, 4..9 acked, the committed offset is exactly 3 and no commit ever passes it.
func TestTrackedCommitsLowestInFlightWhileLaterKeysFinish(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	var recs []*kgo.Record
	for i := range 10 {
		recs = append(recs, &kgo.Record{Topic: "in", Key: fmt.Appendf(nil, "k%d", i), Value: fmt.Appendf(nil, "v%d", i)})
	}
	c.ProduceTo(t, 0, recs...)

	release := make(chan struct{})
	var done seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 3 {
				if err := await(ctx, release); err != nil {
					return err
				}
			}
			done.add(string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.Workers(10), runtime.ByKey)
	start(t, app)

	eventually(t, func() bool { return done.len() == 9 }, "the nine unblocked records were not all handled")
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	for _, cm := range c.CommitLog().Of("g", "in", 0) {
		require.LessOrEqual(t, cm.Offset, int64(3), "a commit passed the blocked record: %+v", cm)
	}
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 10})
}

// A retry with no policy is handled again in place, before the records behind it, and the
// position waits for it (DESIGN §3.2): a, b, b, c; Attempt() of the second b is 2.
func TestTrackedRetryInPlaceKeepsPartitionOrder(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	var s seen
	failed := false
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			v := string(d.Record().Value)
			s.add(v, d.Attempt())
			if v == "b" && !failed {
				failed = true
				return errors.New("transient")
			}
			return nil
		}), runtime.Backoff(func(int, error) time.Duration { return 20 * time.Millisecond }))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	require.Equal(t, []string{"a", "b", "b", "c"}, s.values())
	require.Equal(t, []int{1, 1, 2, 1}, s.attempts())
}

// Auto has no in-place retry: a retry is refused with ErrRetryUnsupported and the record does not
// come back (DESIGN §3.2).
func TestAutoRefusesRetry(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b", "c")
	var s seen
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g"),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			v := string(d.Record().Value)
			s.add(v, d.Attempt())
			if v == "b" {
				return runtime.Retry(errors.New("try again"))
			}
			return nil
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	stop(t, app)
	require.Equal(t, []string{"a", "b", "c"}, s.values())
	refused := obs.outcomes(runtime.OutcomeRetryRefused)
	require.Len(t, refused, 1)
	require.Equal(t, int64(1), refused[0].Offset)
	require.ErrorIs(t, refused[0].Err, runtime.ErrRetryUnsupported)
}

// Transaction markers never reach handlers and are settled by the runtime, so the committed offset
// reaches the high watermark: lag 0 in every mode (DESIGN §3.7a). Delivered events do not count
// them either.
func TestTransactionMarkersNeverReachHandlersAndLagReachesZero(t *testing.T) {
	for _, mode := range []runtime.CommitMode{runtime.Auto, runtime.Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			rec := func(v string) *kgo.Record { return &kgo.Record{Topic: "in", Partition: 0, Value: []byte(v)} }
			c.ProduceTxn(t, "producer", true, rec("c1"), rec("c2"))
			c.ProduceTxn(t, "producer", false, rec("aborted"))
			c.ProduceTxn(t, "producer", true, rec("c3"), rec("c4"))
			hwm := c.HighWatermarks(t, "in")
			require.Equal(t, map[int32]int64{0: 8}, hwm, "2 data + marker, 1 aborted + marker, 2 data + marker")

			var s seen
			obs := &observer{}
			app := runtime.New(appOpts(c, runtime.Observe(obs))...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(mode),
				s.handler())
			start(t, app)
			c.WaitCommitted(t, "g", "in", hwm)
			stop(t, app) // the poll loop reports Delivered after handing the records over: all of them by now
			require.Equal(t, []string{"c1", "c2", "c3", "c4"}, s.values())
			require.Equal(t, 4, obs.totalDelivered(), "Delivered counts the data records, not the markers")
		})
	}
}

// A handler panic fails fast: Run returns a *PanicError and, in the Tracked mode, the panicking
// record is not committed (DESIGN §3.8).
func TestPanicFailsRunAndLeavesRecordUncommitted(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "0", "1", "boom", "3", "4")
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if string(d.Record().Value) == "boom" {
				panic("bad record")
			}
			return nil
		}))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := app.Run(ctx)
	var perr *runtime.PanicError
	require.ErrorAs(t, err, &perr)
	require.Equal(t, "bad record", perr.Value)
	require.Equal(t, int64(2), perr.Offset)
	require.NotEmpty(t, perr.Stack)
	require.Equal(t, map[int32]int64{0: 2}, c.Committed(t, "g", "in"))
	state, reason := app.State()
	require.Equal(t, runtime.StateFailed, state)
	require.ErrorAs(t, reason, &perr)
}

// OnPanic(PanicDrop) and OnPanic(PanicRetry) turn a panic into a drop or an in-place retry.
func TestPanicPolicies(t *testing.T) {
	cases := []struct {
		name   string
		policy runtime.PanicPolicy
		want   []string
	}{
		{"PanicDrop settles the record", runtime.PanicDrop, []string{"a", "boom", "c"}},
		{"PanicRetry handles it again", runtime.PanicRetry, []string{"a", "boom", "boom", "c"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, "a", "boom", "c")
			var s seen
			app := runtime.New(appOpts(c)...)
			runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
				runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
					v := string(d.Record().Value)
					s.add(v, d.Attempt())
					if v == "boom" && d.Attempt() == 1 {
						panic("once")
					}
					return nil
				}), runtime.OnPanic(tc.policy), runtime.Backoff(func(int, error) time.Duration { return time.Millisecond }))
			start(t, app)
			c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
			stop(t, app)
			require.Equal(t, tc.want, s.values())
		})
	}
}

// A handler that calls runtime.Goexit instead of returning (t.FailNow in a handler, say) ends its
// lane's goroutine: the App fails as under PanicFail, whatever OnPanic says, with a *PanicError
// whose Value is ErrHandlerExited, and nothing from that record on is committed. It used to stall
// the partition with no log line, no event and no error: Run waited for its ctx (helper-54). One
// Error line says so, for a batch too (it logged one per element, each with the stack: helper-80).
func TestHandlerThatCallsGoexitFailsTheApp(t *testing.T) {
	for _, tc := range []struct {
		name   string
		mode   runtime.CommitMode
		policy runtime.PanicPolicy
		batch  bool
	}{
		{"Tracked", runtime.Tracked, runtime.PanicFail, false},
		{"Tracked, PanicDrop", runtime.Tracked, runtime.PanicDrop, false},
		{"Auto, PanicRetry", runtime.Auto, runtime.PanicRetry, false},
		{"Tracked, a batch", runtime.Tracked, runtime.PanicFail, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := kfaketest.New(t, kfaketest.Topic("in", 1))
			c.ProduceValues(t, "in", 0, numbered(10)...)
			obs := &observer{}
			var out lockedBuffer
			app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.Logger(slog.New(slog.NewJSONHandler(&out, nil))))...)
			sub := runtime.Topic("in").Group("g").Commit(tc.mode)
			var exitedAt atomic.Int64 // the first offset in the handler that exited
			exitedAt.Store(-1)
			if tc.batch {
				runtime.HandleBatch(app, sub, 4, runtime.BatchHandlerFunc(func(_ context.Context, ds []*runtime.Delivery) []error {
					if ds[len(ds)-1].Record().Offset >= 5 {
						exitedAt.Store(ds[0].Record().Offset)
						goruntime.Goexit()
					}
					return make([]error, len(ds))
				}), runtime.OnPanic(tc.policy))
			} else {
				runtime.Handle(app, sub, runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
					if d.Record().Offset == 5 {
						exitedAt.Store(5)
						goruntime.Goexit()
					}
					return nil
				}), runtime.OnPanic(tc.policy))
			}
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			err := app.Run(ctx)
			require.ErrorIs(t, err, runtime.ErrHandlerExited)
			var perr *runtime.PanicError
			require.ErrorAs(t, err, &perr)
			at := exitedAt.Load()
			require.Equal(t, at, perr.Offset)
			require.Equal(t, map[int32]int64{0: at}, c.Committed(t, "g", "in"))
			state, _ := app.State()
			require.Equal(t, runtime.StateFailed, state)
			panics := obs.outcomes(runtime.OutcomePanic)
			require.NotEmpty(t, panics)
			require.Equal(t, at, panics[0].Offset)
			require.ErrorIs(t, panics[0].Err, runtime.ErrHandlerExited)
			lines := strings.Count(out.String(), `"msg":"tidemark: handler called runtime.Goexit instead of returning"`)
			require.Equal(t, 1, lines, out.String())
			if tc.batch {
				require.Len(t, panics, 4, "one event per element")
				require.Contains(t, out.String(), fmt.Sprintf(`"offset":%d,"generation":1,"attempt":1,"stack":`, at))
				require.Contains(t, out.String(), `"batch":4`)
			}
		})
	}
}

// A Goexit whose deferred clean-up panics while the goroutine exits (t.FailNow, then a clean-up
// that fails): the handler's recover takes the panic and Goexit goes on. The records the take had
// settled stay settled, handled once; the App fails all the same. The lane used to infer the
// record in the handler from its state, found none, and put the whole take back: offsets 0..5
// were handled twice (helper-57).
func TestHandlerGoexitWhoseCleanUpPanics(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(10)...)
	var s seen
	app := runtime.New(appOpts(c)...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			s.add(string(d.Record().Value), d.Attempt())
			if d.Record().Offset == 5 {
				defer func() { panic("clean-up failed") }()
				goruntime.Goexit()
			}
			return nil
		}), runtime.Workers(2))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.ErrorIs(t, app.Run(ctx), runtime.ErrHandlerExited)
	require.Equal(t, numbered(6), s.values())
	require.Equal(t, map[int32]int64{0: 5}, c.Committed(t, "g", "in"))
}

// goexitObserver calls runtime.Goexit in Paused the first time a lane reports a resume: between
// handlers, under the dispatcher's lock, in the middle of finishing a take.
type goexitObserver struct {
	observer
	lanes sync.Map // ids of the goroutines that ran the handler
	done  atomic.Bool
}

func (o *goexitObserver) Paused(e runtime.PausedEvent) {
	o.observer.Paused(e)
	if _, lane := o.lanes.Load(goid()); lane && !e.Paused && o.done.CompareAndSwap(false, true) {
		goruntime.Goexit()
	}
}

// goid is the calling goroutine's id, from its stack's first line.
func goid() uint64 {
	b := make([]byte, 64)
	b = b[:goruntime.Stack(b, false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	n, _ := strconv.ParseUint(string(b[:bytes.IndexByte(b, ' ')]), 10, 64)
	return n
}

// An Observer that calls runtime.Goexit on a lane between handlers fails the App with
// ErrHandlerExited. The lane used to finish its take a second time as it exited: counters
// decremented twice and a nil dereference on a recycled item that killed the process (helper-57).
func TestObserverThatCallsGoexitOnALaneFailsTheApp(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, numbered(40)...)
	obs := &goexitObserver{}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.ShutdownTimeout(time.Second))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
			obs.lanes.Store(goid(), true)
			return nil
		}), runtime.MaxInFlightPerPartition(4))
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	err := app.Run(ctx)
	require.True(t, obs.done.Load(), "no lane reported a resume")
	require.ErrorIs(t, err, runtime.ErrHandlerExited)
}

type payout struct {
	ID     string `json:"id"`
	Amount int    `json:"amount"`
}

// A record that does not decode is dropped once with a decode-failure event, and never stalls its
// partition (DESIGN §3.8).
func TestDecodeFailureDropsTheRecordAndMovesOn(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, `{"id":"a","amount":1}`, `{"id":"b","amount":2}`, `{"id":`, `{"id":"d","amount":4}`, `{"id":"e","amount":5}`)
	var s seen
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.JSON(func(_ context.Context, p payout) error {
			s.add(p.ID, p.Amount)
			return nil
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 5})
	stop(t, app)
	require.Equal(t, []string{"a", "b", "d", "e"}, s.values())
	require.Equal(t, []int{1, 2, 4, 5}, s.attempts())
	fails := obs.outcomes(runtime.OutcomeDecodeFailure)
	require.Len(t, fails, 1)
	require.Equal(t, int64(2), fails[0].Offset)
	require.ErrorIs(t, fails[0].Err, runtime.ErrDecode)
}

// The poll loop never blocks on a lane: a partition at MaxInFlightPerPartition is paused, it never
// holds more than that bound plus one poll, and everything is handled once it drains (DESIGN §3.6).
func TestBackpressurePausesAFullPartition(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	vals := make([]string, 200)
	for i := range vals {
		vals[i] = fmt.Sprint(i)
	}
	c.ProduceValues(t, "in", 0, vals...)
	release := make(chan struct{})
	var s seen
	obs := &observer{}
	app := runtime.New(appOpts(c, runtime.Observe(obs), runtime.MaxPollRecords(50))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(ctx context.Context, d *runtime.Delivery) error {
			if err := await(ctx, release); err != nil {
				return err
			}
			s.add(string(d.Record().Value), d.Attempt())
			return nil
		}), runtime.MaxInFlightPerPartition(8))
	start(t, app)
	eventually(t, func() bool {
		obs.mu.Lock()
		defer obs.mu.Unlock()
		return len(obs.paused) > 0 && obs.paused[0].Paused
	}, "the partition was never paused")
	close(release)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 200})
	stop(t, app)
	require.Equal(t, vals, s.values(), "all handled once, in order")
	obs.mu.Lock()
	defer obs.mu.Unlock()
	for _, e := range obs.delivered {
		require.LessOrEqual(t, e.InFlight, 8+50, "held more than the bound plus one poll")
	}
	require.False(t, obs.paused[len(obs.paused)-1].Paused, "the partition ends resumed")
}
