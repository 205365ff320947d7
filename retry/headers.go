package retry

import (
	"strconv"
	"time"

	"github.com/twmb/franz-go/pkg/kgo"
)

// Header keys of retry copies (DESIGN §3.3). Values are ASCII decimal unless said otherwise.
const (
	// NotBeforeHeader is the earliest time a copy may be handled, in unix milliseconds.
	NotBeforeHeader = "x-tidemark-not-before"
	// GroupHeader names the consumer group that made the copy; other groups settle it unhandled.
	GroupHeader = "x-tidemark-retry-group"
	// OriginTopicHeader, OriginPartitionHeader, OriginOffsetHeader and OriginTimestampHeader
	// (unix ms) name the original record. The first copy sets them; later copies keep them.
	OriginTopicHeader     = "x-tidemark-origin-topic"
	OriginPartitionHeader = "x-tidemark-origin-partition"
	OriginOffsetHeader    = "x-tidemark-origin-offset"
	OriginTimestampHeader = "x-tidemark-origin-timestamp"
)

// An Origin names the original record a copy descends from.
type Origin struct {
	Topic     string
	Partition int32
	Offset    int64
	Timestamp time.Time // millisecond precision
}

// OriginOf returns the original record of r: its origin headers when r is a copy carrying all
// four, else r itself.
func OriginOf(r *kgo.Record) Origin {
	o := Origin{Topic: r.Topic, Partition: r.Partition, Offset: r.Offset, Timestamp: r.Timestamp}
	topic, ok1 := header(r, OriginTopicHeader)
	part, ok2 := header(r, OriginPartitionHeader)
	off, ok3 := header(r, OriginOffsetHeader)
	ts, ok4 := header(r, OriginTimestampHeader)
	if !ok1 || !ok2 || !ok3 || !ok4 {
		return o
	}
	p, err1 := strconv.ParseInt(part, 10, 32)
	n, err2 := strconv.ParseInt(off, 10, 64)
	ms, err3 := strconv.ParseInt(ts, 10, 64)
	if err1 != nil || err2 != nil || err3 != nil {
		return o
	}
	return Origin{Topic: topic, Partition: int32(p), Offset: n, Timestamp: time.UnixMilli(ms)}
}

// NotBefore returns the time r's NotBeforeHeader names, and false when r has none (or it is
// malformed): such a record is due at once.
func NotBefore(r *kgo.Record) (time.Time, bool) {
	v, ok := header(r, NotBeforeHeader)
	if !ok {
		return time.Time{}, false
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.UnixMilli(ms), true
}

// GroupOf returns the group that made the copy r, "" for a record that is not a copy.
func GroupOf(r *kgo.Record) string {
	v, _ := header(r, GroupHeader)
	return v
}

// Copy returns a retry copy of r made by group, due at notBefore. attempts is the number of r's
// delivery that failed (the handler's Delivery.Attempt, at least 1; a smaller value is taken as 1,
// a larger one than MaxCount as MaxCount, the most Count reads) and becomes the copy's retry count, so the copy's first delivery is attempt attempts+1; for a
// record retried only through copies it is Count(r)+1. The copy keeps r's key, value and user
// headers (each once), and carries the origin headers (r's own on a first copy, kept on later
// ones), the group (none when group is "") and the not-before time (none when zero; rounded up to
// the header's millisecond). Topic and Partition are left for the caller.
func Copy(r *kgo.Record, group string, attempts int, notBefore time.Time) *kgo.Record {
	o := OriginOf(r)
	c := &kgo.Record{Key: r.Key, Value: r.Value, Headers: UserHeaders(r.Headers)}
	c.Headers = append(c.Headers,
		kgo.RecordHeader{Key: CountHeader, Value: strconv.AppendInt(nil, int64(min(max(attempts, 1), MaxCount)), 10)},
		kgo.RecordHeader{Key: OriginTopicHeader, Value: []byte(o.Topic)},
		kgo.RecordHeader{Key: OriginPartitionHeader, Value: strconv.AppendInt(nil, int64(o.Partition), 10)},
		kgo.RecordHeader{Key: OriginOffsetHeader, Value: strconv.AppendInt(nil, o.Offset, 10)},
		kgo.RecordHeader{Key: OriginTimestampHeader, Value: strconv.AppendInt(nil, o.Timestamp.UnixMilli(), 10)},
	)
	if group != "" {
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: GroupHeader, Value: []byte(group)})
	}
	if !notBefore.IsZero() {
		c.Headers = append(c.Headers, kgo.RecordHeader{Key: NotBeforeHeader, Value: strconv.AppendInt(nil, ceilMilli(notBefore), 10)})
	}
	return c
}

// ceilMilli returns t in unix milliseconds, rounded up: a copy is never due before the time it was
// asked for (helper-124: truncated, a RetryAfter(300ms) copy ran 299.79 ms after its attempt began).
func ceilMilli(t time.Time) int64 {
	ms := t.UnixMilli() // rounded down, before 1970 too
	if t.After(time.UnixMilli(ms)) {
		ms++
	}
	return ms
}

// UserHeaders returns hs without Tidemark's retry headers (the ones Copy sets), in order.
func UserHeaders(hs []kgo.RecordHeader) []kgo.RecordHeader {
	out := make([]kgo.RecordHeader, 0, len(hs)+7)
	for _, h := range hs {
		switch h.Key {
		case CountHeader, NotBeforeHeader, GroupHeader,
			OriginTopicHeader, OriginPartitionHeader, OriginOffsetHeader, OriginTimestampHeader:
			continue
		}
		out = append(out, h)
	}
	return out
}

// header returns the last value of key among r's headers.
func header(r *kgo.Record, key string) (string, bool) {
	v, ok := "", false
	for _, h := range r.Headers {
		if h.Key == key {
			v, ok = string(h.Value), true
		}
	}
	return v, ok
}
