package dlq

import (
	"slices"
	"strconv"
	"time"
	"unicode/utf8"

	"github.com/tidemark-io/tidemark/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

// Header keys of dead-letter records (DESIGN §3.3). Numbers are ASCII decimal; the timestamp is
// unix milliseconds.
const (
	TopicHeader     = "x-tidemark-dlq-topic"
	PartitionHeader = "x-tidemark-dlq-partition"
	OffsetHeader    = "x-tidemark-dlq-offset"
	TimestampHeader = "x-tidemark-dlq-timestamp"
	GroupHeader     = "x-tidemark-dlq-group"
	ErrorHeader     = "x-tidemark-dlq-error"
	AttemptsHeader  = "x-tidemark-dlq-attempts"
)

// MaxErrorBytes bounds ErrorHeader's value: longer error texts are truncated to it, at a character
// boundary, so a text that is valid UTF-8 stays so. Bytes that are not (an error quoting a binary
// payload) are kept as they are, and cut at MaxErrorBytes where no character starts near it.
const MaxErrorBytes = 1024

// Record returns the dead-letter record of r for topic: a retry copy of r (retry.Copy with no
// group and no delay, so any group may consume it; its retry count is attempts) plus the
// provenance headers, naming group, the handler's error cause (nil allowed) and how many
// deliveries r had (attempts, from 1 to retry.MaxCount; a value outside is taken as the nearer
// bound, so AttemptsHeader and retry.CountHeader always agree). Partition is left for the
// producer's partitioner.
func Record(r *kgo.Record, topic, group string, attempts int, cause error) *kgo.Record {
	o := retry.OriginOf(r)
	attempts = min(max(attempts, 1), retry.MaxCount)
	d := retry.Copy(r, "", attempts, time.Time{})
	d.Topic = topic
	d.Headers = slices.DeleteFunc(d.Headers, func(h kgo.RecordHeader) bool { // each header once
		switch h.Key {
		case TopicHeader, PartitionHeader, OffsetHeader, TimestampHeader, GroupHeader, ErrorHeader, AttemptsHeader:
			return true
		}
		return false
	})
	msg := ""
	if cause != nil {
		msg = cause.Error()
	}
	if len(msg) > MaxErrorBytes {
		// Never in the middle of a character: at the start of the one msg[MaxErrorBytes] belongs
		// to, found at most UTFMax-1 bytes back (where valid text has it). Stray continuation bytes
		// (binary text) have none there: cut at MaxErrorBytes, not back to the run's start.
		cut := MaxErrorBytes
		for i := MaxErrorBytes; i > MaxErrorBytes-utf8.UTFMax; i-- {
			if utf8.RuneStart(msg[i]) {
				cut = i
				break
			}
		}
		msg = msg[:cut]
	}
	d.Headers = append(d.Headers,
		kgo.RecordHeader{Key: TopicHeader, Value: []byte(o.Topic)},
		kgo.RecordHeader{Key: PartitionHeader, Value: strconv.AppendInt(nil, int64(o.Partition), 10)},
		kgo.RecordHeader{Key: OffsetHeader, Value: strconv.AppendInt(nil, o.Offset, 10)},
		kgo.RecordHeader{Key: TimestampHeader, Value: strconv.AppendInt(nil, o.Timestamp.UnixMilli(), 10)},
		kgo.RecordHeader{Key: GroupHeader, Value: []byte(group)},
		kgo.RecordHeader{Key: ErrorHeader, Value: []byte(msg)},
		kgo.RecordHeader{Key: AttemptsHeader, Value: strconv.AppendInt(nil, int64(attempts), 10)},
	)
	return d
}
