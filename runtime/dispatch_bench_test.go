package runtime

import (
	"context"
	"io"
	"log/slog"
	goruntime "runtime"
	"sync/atomic"
	"testing"

	"github.com/tidemark-io/tidemark/internal/cputime"
	"github.com/twmb/franz-go/pkg/kgo"
)

// BenchmarkDispatch measures the runtime's own CPU per record, without Kafka: polls of 8
// partitions × 1,000 records are pushed as the poll loop pushes them (waitRoom, then push in
// MaxPollRecords chunks) to one lane with a handler that only counts, with the default bounds.
// One op is one record; cpu-ns/op is the process's CPU time (every goroutine) per record.
// "poll-loop" is the same records made and counted by a loop alone (what a raw franz-go poll loop
// does with them); the difference is what the dispatcher, the lane, the settlement and the marks
// cost. A 256 MiB ballast of bytes stands for the end-to-end benchmark's heap (the in-process
// cluster holds the input, a few hundred MiB): without it the heap is a few MiB, the collector
// runs every few milliseconds and its cost hides the runtime's.
func BenchmarkDispatch(b *testing.B) {
	ballast := make([]byte, 256<<20)
	defer goruntime.KeepAlive(ballast)
	goruntime.GC()
	b.Run("poll-loop", func(b *testing.B) {
		defer reportCPU(b)()
		var n atomic.Int64
		for done := 0; done < b.N; {
			fs := synthPoll(b.N-done, int64(done))
			fs.EachRecord(func(*kgo.Record) { n.Add(1) })
			done += fs.NumRecords()
		}
	})
	for _, m := range []struct {
		name string
		mode CommitMode
	}{{"Auto", Auto}, {"Tracked", Tracked}} {
		b.Run(m.name, func(b *testing.B) { benchDispatch(b, m.mode) })
	}
}

const (
	synthParts   = 8
	synthPerPart = 1000
)

var synthValue = make([]byte, 100)

// synthPoll returns a poll of at most limit records over synthParts partitions, offsets from
// base/synthParts on, as franz-go would decode them (one allocation per record).
func synthPoll(limit int, base int64) kgo.Fetches {
	per := min(synthPerPart, (limit+synthParts-1)/synthParts)
	parts := make([]kgo.FetchPartition, synthParts)
	for p := range parts {
		recs := make([]*kgo.Record, per)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: "t", Partition: int32(p), Offset: base/synthParts + int64(i), Value: synthValue}
		}
		parts[p] = kgo.FetchPartition{Partition: int32(p), Records: recs}
	}
	return kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: parts}}}}
}

func benchDispatch(b *testing.B, mode CommitMode) {
	var n atomic.Int64
	all := make(chan struct{})
	var want atomic.Int64
	want.Store(-1)
	c, stop := startBare(b, mode, HandlerFunc(func(context.Context, *Delivery) error {
		if n.Add(1) == want.Load() {
			close(all)
		}
		return nil
	}))
	defer stop()
	ctx := context.Background()
	b.ResetTimer()
	stopCPU := reportCPU(b)
	pushed := 0
	for pushed < b.N {
		if !c.d.waitRoom(ctx) {
			b.Fatal("waitRoom: stopped")
		}
		fs := synthPoll(b.N-pushed, int64(pushed))
		pushed += fs.NumRecords()
		if pushed >= b.N {
			want.Store(int64(pushed))
		}
		if _, _, err := c.d.push(fs, c.app.cfg.maxPollRecords); err != nil {
			b.Fatal(err)
		}
	}
	if n.Load() < int64(pushed) {
		<-all
	}
	b.StopTimer()
	stopCPU()
}

// startBare starts a consumer of synthParts manual partitions of topic "t" in mode with handler h,
// default options, and no Kafka: its lanes and committer run, records come only from d.push
// (nothing is polled; its client never connects). stop stops it.
func startBare(tb testing.TB, mode CommitMode, h Handler) (c *consumer, stop func()) {
	c = newBare(tb, mode, h)
	for range c.cfg.workers {
		c.wg.Go(c.lane)
	}
	c.commDone = make(chan struct{})
	c.wg.Go(c.committer)
	return c, func() {
		c.d.stop()
		close(c.stopComm)
		c.wg.Wait()
		c.cutWork(nil)
		c.cl.Close()
	}
}

// newBare is startBare without the lanes and the committer: the caller takes and finishes records
// itself (d.take, d.finishTake) and closes c.cl.
func newBare(tb testing.TB, mode CommitMode, h Handler) *consumer {
	a := New(Brokers("127.0.0.1:1"), Logger(slog.New(slog.NewTextHandler(io.Discard, nil))))
	parts := make([]int32, synthParts)
	for p := range parts {
		parts[p] = int32(p)
	}
	reg := registration{sub: Partitions("t", parts...).Commit(mode), handler: h, cfg: defaultHandleConfig()}
	c, err := newConsumer(a, 0, reg, context.Background())
	if err != nil {
		tb.Fatal(err)
	}
	for _, p := range parts {
		c.d.add(c.newPart(tp{"t", p}))
	}
	return c
}

// reportCPU starts measuring the process's CPU time; the returned func reports it per op.
func reportCPU(b *testing.B) func() {
	start, ok := cputime.Process()
	return func() {
		if end, ok2 := cputime.Process(); ok && ok2 {
			b.ReportMetric(float64(end-start)/float64(b.N), "cpu-ns/op")
		}
	}
}
