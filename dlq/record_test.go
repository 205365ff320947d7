package dlq

import (
	"errors"
	"math"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
	"github.com/tidemark-io/tidemark/retry"
	"github.com/twmb/franz-go/pkg/kgo"
)

func values(r *kgo.Record, key string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// A dead-letter record of a spent copy names the ORIGINAL record, keeps the bytes, and carries no
// retry group, so any group may consume the dead-letter topic (DESIGN §3.3).
func TestRecordNamesTheOriginalOfASpentCopy(t *testing.T) {
	orig := &kgo.Record{Topic: "payouts", Partition: 1, Offset: 7, Timestamp: time.UnixMilli(1000), Key: []byte("k"), Value: []byte{0xFF, 0xFE, 0x00}}
	c1 := retry.Copy(orig, "g", 1, time.UnixMilli(2000))
	c1.Topic, c1.Partition, c1.Offset = "payouts", 1, 9
	c2 := retry.Copy(c1, "g", 2, time.UnixMilli(3000))
	c2.Topic, c2.Partition, c2.Offset = "payouts", 1, 12

	d := Record(c2, "payouts.dlq", "g", 3, errors.New("bank down"))
	require.Equal(t, "payouts.dlq", d.Topic)
	require.Equal(t, orig.Key, d.Key)
	require.Equal(t, orig.Value, d.Value)
	want := map[string][]string{
		TopicHeader: {"payouts"}, PartitionHeader: {"1"}, OffsetHeader: {"7"}, TimestampHeader: {"1000"},
		GroupHeader: {"g"}, ErrorHeader: {"bank down"}, AttemptsHeader: {"3"},
		retry.CountHeader: {"3"}, retry.GroupHeader: nil, retry.NotBeforeHeader: nil,
	}
	for k, v := range want {
		require.Equal(t, v, values(d, k), k)
	}
}

// The error text is truncated to 1 KiB; a nil cause leaves it empty.
func TestRecordTruncatesTheErrorText(t *testing.T) {
	r := &kgo.Record{Topic: "t"}
	long := errors.New(strings.Repeat("x", 5000))
	require.Equal(t, []string{strings.Repeat("x", MaxErrorBytes)}, values(Record(r, "dlq", "g", 1, long), ErrorHeader))
	require.Equal(t, []string{""}, values(Record(r, "dlq", "g", 1, nil), ErrorHeader))
}

// A record dead-lettered twice (say, replayed from the dead-letter topic and failing again) still
// carries each provenance header once.
func TestRecordOfADeadLetterRecordKeepsOneProvenance(t *testing.T) {
	r := &kgo.Record{Topic: "in", Offset: 3, Timestamp: time.UnixMilli(10)}
	once := Record(r, "dlq", "g", 1, errors.New("first"))
	once.Topic, once.Offset = "dlq", 0
	twice := Record(once, "dlq", "g2", 2, errors.New("second"))
	for _, k := range []string{TopicHeader, PartitionHeader, OffsetHeader, TimestampHeader, GroupHeader, ErrorHeader, AttemptsHeader} {
		require.Len(t, values(twice, k), 1, k)
	}
	require.Equal(t, []string{"second"}, values(twice, ErrorHeader))
	require.Equal(t, []string{"3"}, values(twice, OffsetHeader), "still the original's offset")
}

// A long error text is cut at a character boundary, the last character whole, whatever its width
// and wherever it falls against MaxErrorBytes; attempts below 1 are taken as 1 in both counts, and
// above retry.MaxCount as retry.MaxCount (the dlq count said one more than the retry count).
func TestRecordKeepsItsHeadersValid(t *testing.T) {
	r := &kgo.Record{Topic: "t"}
	long := errors.New(strings.Repeat("é", 1000)) // 2 bytes each: 1,024 falls between two
	got := values(Record(r, "dlq", "g", 1, long), ErrorHeader)[0]
	require.True(t, utf8.ValidString(got))
	require.Equal(t, strings.Repeat("é", MaxErrorBytes/2), got)
	for _, c := range []string{"é", "€", "😀"} { // 2, 3 and 4 bytes
		for pad := range len(c) {
			msg := strings.Repeat("x", pad) + strings.Repeat(c, MaxErrorBytes)
			got := values(Record(r, "dlq", "g", 1, errors.New(msg)), ErrorHeader)[0]
			whole := (MaxErrorBytes - pad) / len(c)
			require.Equal(t, msg[:pad+whole*len(c)], got, "%q after %d bytes", c, pad)
		}
	}
	d := Record(r, "dlq", "g", -3, nil)
	require.Equal(t, []string{"1"}, values(d, AttemptsHeader))
	require.Equal(t, []string{"1"}, values(d, retry.CountHeader))
	d = Record(r, "dlq", "g", math.MaxInt, nil)
	require.Equal(t, []string{"2147483647"}, values(d, AttemptsHeader))
	require.Equal(t, []string{"2147483647"}, values(d, retry.CountHeader))
}

// An error text quoting binary bytes (no character starts around the cut) is cut at MaxErrorBytes
// as any other, not walked back to the start of the run: it was cut to its first 22 bytes, and
// one of stray bytes only to nothing (helper-78).
func TestRecordCutsBinaryErrorTextAtTheBound(t *testing.T) {
	r := &kgo.Record{Topic: "t"}
	for _, msg := range []string{
		"decode failed: payload " + strings.Repeat("\x80", 2000),
		strings.Repeat("\x80", 2000),
	} {
		got := values(Record(r, "dlq", "g", 1, errors.New(msg)), ErrorHeader)[0]
		require.Equal(t, msg[:MaxErrorBytes], got)
	}
}
