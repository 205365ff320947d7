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
	"time"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/kfaketest"
	"github.com/tidemark-io/tidemark/runtime"
	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
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

// A dead letter still held by the cluster when Shutdown's bound passes fails with the handler's
// cancelled ctx: the record stays uncommitted, and the line says so at Warn, with the cause, not at
// Error as a failed produce (helper-126: routine stops past a tiny bound logged Errors).
func TestACopyCutByTheShutdownBoundLogsAtWarn(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("in.dlq", 1))
	c.ProduceValues(t, "in", 0, "a")
	release := c.HoldProduce()
	defer release()
	var out lockedBuffer
	handled := make(chan struct{})
	app := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&out, nil))),
		runtime.FlushTimeout(100*time.Millisecond))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error {
			close(handled)
			return runtime.Drop(errors.New("unwanted"))
		}), runtime.DeadLetter("in.dlq"))
	ctx, cancel := context.WithTimeout(context.Background(), kfaketest.WaitTimeout)
	defer cancel()
	require.NoError(t, app.Start(ctx))
	waitClosed(t, handled, "the record was never handled")
	sctx, scancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer scancel()
	err := app.Shutdown(sctx)
	require.ErrorIs(t, err, context.DeadlineExceeded, "the drain bound passed")
	require.ErrorIs(t, err, runtime.ErrUnflushed, "the dead letter was still held")
	release()

	require.NotContains(t, out.String(), `"level":"ERROR"`)
	var line string
	for l := range strings.Lines(out.String()) {
		if strings.Contains(l, "dead-letter record not produced") {
			line = l
		}
	}
	require.Contains(t, line, `"level":"WARN","msg":"tidemark: dead-letter record not produced before the record's ctx ended; the record stays uncommitted for whoever reads it next"`)
	require.Contains(t, line, `"handler_err":"unwanted","reason":"drop","cause":"tidemark: shutdown bound passed"`)
	committed := c.Committed(t, "g", "in")
	require.Zero(t, committed[0], "the record is not committed past: %v", committed)
}

// A record dropped or undecodable under a DeadLetter logs one line, at Warn: where it went and why
// (helper-136: "record dropped: it does not decode" came first, for a record that was not dropped).
func TestADeadLetteredDropLogsOneLine(t *testing.T) {
	c := kfaketest.New(t, kfaketest.Topic("in", 1), kfaketest.Topic("in.dlq", 1))
	c.ProduceValues(t, "in", 0, "not json", `{"n":1}`)
	var out lockedBuffer
	app := runtime.New(appOpts(c, runtime.Logger(slog.New(slog.NewJSONHandler(&out, nil))))...)
	runtime.Handle(app, runtime.Topic("in").Group("g").Commit(runtime.Tracked),
		runtime.JSON(func(context.Context, struct{ N int }) error { return runtime.Drop(errors.New("unwanted")) }),
		runtime.DeadLetter("in.dlq"))
	start(t, app)
	c.WaitCommitted(t, "g", "in", map[int32]int64{0: 2})
	stop(t, app)
	var lines []map[string]any
	for l := range strings.Lines(out.String()) {
		var attrs map[string]any
		require.NoError(t, json.Unmarshal([]byte(l), &attrs))
		delete(attrs, "time")
		if attrs["topic"] == "in" {
			lines = append(lines, attrs)
		}
	}
	require.Len(t, lines, 2, out.String())
	require.Equal(t, []map[string]any{{
		"level": "WARN", "msg": "tidemark: record sent to the dead-letter topic",
		"subscription": `Topic("in")`, "group": "g", "mode": "Tracked",
		"topic": "in", "partition": 0.0, "offset": 0.0, "generation": 1.0, "attempt": 1.0,
		"err": "tidemark: record could not be decoded: invalid character 'o' in literal null (expecting 'u')",
		"to":  "in.dlq", "reason": "decode_failure",
	}, {
		"level": "WARN", "msg": "tidemark: record sent to the dead-letter topic",
		"subscription": `Topic("in")`, "group": "g", "mode": "Tracked",
		"topic": "in", "partition": 0.0, "offset": 1.0, "generation": 1.0, "attempt": 1.0,
		"err": "unwanted", "to": "in.dlq", "reason": "drop",
	}}, lines, out.String())
}

// A fetch error that franz-go meets on every fetch (no Read ACL on the topic: it fetches again at
// once) is logged once per partition every 10 s, with how many it did not log, not once per fetch
// (helper-141: 49,168 Warn lines in about 4 s on kfake). The test waits for the second line.
func TestARepeatedFetchErrorIsLoggedOnce(t *testing.T) {
	k := aclCluster(t, []string{"in"}, // Describe on the topic and Read on the group, no Read on the topic
		allow(kmsg.ACLResourceTypeTopic, "in", kmsg.ACLOperationDescribe),
		allow(kmsg.ACLResourceTypeGroup, "g", kmsg.ACLOperationRead))
	admin, err := kgo.NewClient(kgo.SeedBrokers(k.ListenAddrs()...), asUser("admin"))
	require.NoError(t, err)
	defer admin.Close()
	// With a record to read, each fetch is answered at once (an empty partition's waits its
	// MaxWait): the errors come at the round trip's pace.
	require.NoError(t, admin.ProduceSync(context.Background(), &kgo.Record{Topic: "in", Value: []byte("a")}).FirstErr())
	var out lockedBuffer
	app := aclApp(k, slog.New(slog.NewJSONHandler(&out, nil)))
	runtime.Handle(app, runtime.Topic("in"), runtime.HandlerFunc(func(context.Context, *runtime.Delivery) error { return nil }))
	start(t, app)
	lines := func() (ls []map[string]any) {
		for l := range strings.Lines(out.String()) {
			var attrs map[string]any
			require.NoError(t, json.Unmarshal([]byte(l), &attrs))
			if attrs["msg"] == "tidemark: fetch error" {
				ls = append(ls, attrs)
			}
		}
		return ls
	}
	require.Eventually(t, func() bool { return len(lines()) >= 2 }, 40*time.Second, 10*time.Millisecond, "no second line:\n%s", &out)
	stop(t, app)
	ls := lines()
	require.Len(t, ls, 2, "one line every 10 s")
	for _, l := range ls {
		require.Equal(t, "in", l["topic"])
		require.Equal(t, 0.0, l["partition"])
		require.Equal(t, kerr.TopicAuthorizationFailed.Error(), l["err"])
	}
	require.NotContains(t, ls[0], "repeated")
	require.Greater(t, ls[1]["repeated"], 100.0, "the errors between the two lines")
}
