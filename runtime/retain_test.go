package runtime

import (
	"context"
	goruntime "runtime"
	"testing"
	"time"
	"weak"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Once every record of a poll is handled and settled, the runtime keeps none of them: franz-go's
// record values are slices of the fetch response, so a record kept per partition (Auto's done
// position) or per lane (its reused Delivery) would keep a whole fetch buffer alive for as long
// as its partition gets nothing new (DESIGN §3.6: memory stays flat).
func TestSettledRecordsKeepNoFetchBufferAlive(t *testing.T) {
	for _, mode := range []CommitMode{Auto, Tracked} {
		t.Run(mode.String(), func(t *testing.T) {
			const per = 100
			handled := make(chan struct{}, synthParts*per)
			c, stop := startBare(t, mode, HandlerFunc(func(context.Context, *Delivery) error {
				handled <- struct{}{}
				return nil
			}))
			defer stop()
			bufs := pushBuffered(t, c, per) // one 1 MiB "fetch response" per partition
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			for i := range synthParts * per {
				select {
				case <-handled:
				case <-ctx.Done():
					t.Fatalf("handled %d of %d records", i, synthParts*per)
				}
			}
			if err := c.d.waitIdle(ctx, nil); err != nil {
				t.Fatalf("the lanes did not finish: %v", err)
			}
			goruntime.GC()
			goruntime.GC()
			alive := 0
			for _, w := range bufs {
				if w.Value() != nil {
					alive++
				}
			}
			if alive > 0 {
				t.Fatalf("%d of %d fetch buffers are still reachable after every record was settled", alive, len(bufs))
			}
		})
	}
}

// pushBuffered pushes per records to each of c's partitions, their values slices of one 1 MiB
// buffer per partition, as franz-go decodes a fetch, and returns weak pointers to the buffers.
func pushBuffered(t *testing.T, c *consumer, per int) []weak.Pointer[byte] {
	var bufs []weak.Pointer[byte]
	parts := make([]kgo.FetchPartition, synthParts)
	for p := range parts {
		buf := make([]byte, 1<<20)
		bufs = append(bufs, weak.Make(&buf[0]))
		recs := make([]*kgo.Record, per)
		for i := range recs {
			recs[i] = &kgo.Record{Topic: "t", Partition: int32(p), Offset: int64(i), Value: buf[i*100 : (i+1)*100]}
		}
		parts[p] = kgo.FetchPartition{Partition: int32(p), Records: recs}
	}
	fs := kgo.Fetches{{Topics: []kgo.FetchTopic{{Topic: "t", Partitions: parts}}}}
	if _, _, err := c.d.push(fs, c.app.cfg.maxPollRecords); err != nil {
		t.Fatal(err)
	}
	return bufs
}
