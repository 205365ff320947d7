package runtime_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
)

// lockedBuffer is a bytes.Buffer a logger writes to from many goroutines.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A record's log line names each attribute once, the subscription's (from the App's logger) and the
// record's alike: a JSON log backend gets no duplicate key.
func TestRecordLogLineHasEachKeyOnce(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "bad")
	var out lockedBuffer
	app := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&out, nil))))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
			return runtime.Drop(errors.New("unwanted"))
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 1})

	var line string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, `"msg":"tidemark: record dropped"`) {
			line = l
		}
	}
	require.NotEmpty(t, line, "no drop line in the log:\n%s", out.String())
	require.Equal(t, 1, strings.Count(line, `"group":`), "the group key in %s", line)
	var attrs map[string]any
	require.NoError(t, json.Unmarshal([]byte(line), &attrs))
	delete(attrs, "time")
	require.Equal(t, map[string]any{
		"level": "INFO", "msg": "tidemark: record dropped",
		"subscription": `Topic("in")`, "group": "g", "mode": "Tracked",
		"topic": "in", "partition": 0.0, "offset": 0.0, "generation": 1.0, "attempt": 1.0,
		"err": "unwanted",
	}, attrs)
}

// Drop(nil), a handler filtering records out, logs at Debug, not a line per record at Info; a drop
// with a reason logs at Info (helper-80).
func TestADropWithoutAReasonLogsAtDebug(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1))
	c.ProduceValues(t, "in", 0, "a", "b")
	var info, debug lockedBuffer
	app := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&info, nil))))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(_ context.Context, d *runtime.Delivery) error {
			if d.Record().Offset == 0 {
				return runtime.Drop(nil)
			}
			return runtime.Drop(errors.New("unwanted"))
		}))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	require.Equal(t, 1, strings.Count(info.String(), `"msg":"tidemark: record dropped"`), info.String())
	require.Contains(t, info.String(), `"offset":1,"generation":1,"attempt":1,"err":"unwanted"`)

	c.ProduceValues(t, "in", 0, "c")
	next := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&debug, &slog.HandlerOptions{Level: slog.LevelDebug}))))...)
	runtime.Handle(next, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return runtime.Drop(nil) }))
	start(t, next)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 3})
	stop(t, next)
	require.Contains(t, debug.String(), `"level":"DEBUG","msg":"tidemark: record dropped"`)
	require.Contains(t, debug.String(), `"offset":2,"generation":1,"attempt":1,"err":"tidemark: dropped"`)
}
