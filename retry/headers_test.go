package retry

import (
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func headerValues(r *kgo.Record, key string) []string {
	var out []string
	for _, h := range r.Headers {
		if h.Key == key {
			out = append(out, string(h.Value))
		}
	}
	return out
}

// A copy of a copy carries one retry count and keeps the origin of the first original; user headers
// appear once however many hops (DESIGN §3.3).
func TestCopyOfACopyKeepsOneCountAndTheFirstOrigin(t *testing.T) {
	ts := time.UnixMilli(1_700_000_000_123)
	orig := &kgo.Record{Topic: "payouts", Partition: 2, Offset: 41, Timestamp: ts, Key: []byte("k"), Value: []byte{0xFF, 0xFE, 0x00},
		Headers: []kgo.RecordHeader{{Key: "trace", Value: []byte("abc")}}}
	due := time.UnixMilli(1_800_000_000_000)
	c1 := Copy(orig, "g", 1, due)
	c1.Topic, c1.Partition, c1.Offset, c1.Timestamp = "payouts", 2, 57, time.UnixMilli(1_700_000_009_000)
	c2 := Copy(c1, "g", 2, time.Time{})

	require.Equal(t, orig.Key, c2.Key)
	require.Equal(t, orig.Value, c2.Value)
	require.Equal(t, []string{"abc"}, headerValues(c2, "trace"))
	require.Equal(t, []string{"1"}, headerValues(c1, CountHeader))
	require.Equal(t, []string{"2"}, headerValues(c2, CountHeader))
	require.Equal(t, []string{"1800000000000"}, headerValues(c1, NotBeforeHeader))
	require.Empty(t, headerValues(c2, NotBeforeHeader))
	require.Equal(t, []string{"g"}, headerValues(c2, GroupHeader))
	for _, c := range []*kgo.Record{c1, c2} {
		require.Equal(t, []string{"payouts"}, headerValues(c, OriginTopicHeader))
		require.Equal(t, []string{"2"}, headerValues(c, OriginPartitionHeader))
		require.Equal(t, []string{"41"}, headerValues(c, OriginOffsetHeader))
		require.Equal(t, []string{"1700000000123"}, headerValues(c, OriginTimestampHeader))
	}
	require.Equal(t, Origin{Topic: "payouts", Partition: 2, Offset: 41, Timestamp: ts}, OriginOf(c2))
	require.Equal(t, 2, Count(c2))
	nb, ok := NotBefore(c1)
	require.True(t, ok)
	require.Equal(t, due, nb)
	_, ok = NotBefore(orig)
	require.False(t, ok)
	require.Equal(t, "g", GroupOf(c1))
	require.Equal(t, "", GroupOf(orig))
	// A not-before within a millisecond is rounded up, never down: the copy is not due early.
	for _, tc := range []struct {
		due  time.Time
		want string
	}{
		{due.Add(time.Microsecond), "1800000000001"},
		{due.Add(999 * time.Microsecond), "1800000000001"},
		{due.Add(time.Millisecond), "1800000000001"},
		{time.UnixMilli(-5).Add(-time.Microsecond), "-5"},
	} {
		require.Equal(t, []string{tc.want}, headerValues(Copy(orig, "g", 1, tc.due), NotBeforeHeader), "due %v", tc.due)
	}
	require.Len(t, orig.Headers, 1, "the original is not changed")
}

// An original is its own origin; partial or malformed origin headers read as the record itself.
func TestOriginOfAnOriginalIsItself(t *testing.T) {
	r := &kgo.Record{Topic: "t", Partition: 1, Offset: 9, Timestamp: time.UnixMilli(5),
		Headers: []kgo.RecordHeader{{Key: OriginTopicHeader, Value: []byte("x")}, {Key: OriginOffsetHeader, Value: []byte("nope")}}}
	require.Equal(t, Origin{Topic: "t", Partition: 1, Offset: 9, Timestamp: time.UnixMilli(5)}, OriginOf(r))
}

// A copy's count is the failed delivery's number; below 1 it is taken as 1, so a copy never reads
// as an original (DESIGN §3.3); above MaxCount (a forged count of MaxCount, delivered once more) it
// is MaxCount, the most Count reads.
func TestCopyCountIsTheFailedDelivery(t *testing.T) {
	orig := &kgo.Record{Topic: "t", Offset: 3}
	require.Equal(t, []string{"4"}, headerValues(Copy(orig, "g", 4, time.Time{}), CountHeader))
	require.Equal(t, []string{"1"}, headerValues(Copy(orig, "g", 0, time.Time{}), CountHeader))
	require.Equal(t, 1, Count(Copy(orig, "g", -2, time.Time{})))
	if strconv.IntSize == 64 { // no int is above MaxCount on 32 bits
		above := int64(MaxCount)
		above++
		require.Equal(t, []string{"2147483647"}, headerValues(Copy(orig, "g", int(above), time.Time{}), CountHeader))
	}
}

// A retry count past MaxCount reads as MaxCount: an attempt number built from it cannot overflow.
func TestCountIsCapped(t *testing.T) {
	r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: CountHeader, Value: []byte("9223372036854775807")}}}
	require.Equal(t, MaxCount, Count(r))
}

// A not-before value that is not a decimal int64 reads as none (the copy is due at once); one that
// parses, however far off, is kept as it is (docs/retries-and-dead-letters.md, Parked copies).
func TestNotBeforeReadsOnlyADecimalInt64(t *testing.T) {
	for _, tc := range []struct {
		value string
		ms    int64
		ok    bool
	}{
		{"1800000000000", 1_800_000_000_000, true},
		{"-5", -5, true},
		{"+5", 5, true},
		{"9223372036854775807", 9223372036854775807, true},
		{"9223372036854775808", 0, false}, // one past int64
		{"99999999999999999999", 0, false},
		{"", 0, false},
		{" 5", 0, false},
		{"5ms", 0, false},
		{"0x10", 0, false},
	} {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: NotBeforeHeader, Value: []byte(tc.value)}}}
		nb, ok := NotBefore(r)
		require.Equal(t, tc.ok, ok, "%q", tc.value)
		if tc.ok {
			require.Equal(t, time.UnixMilli(tc.ms), nb, "%q", tc.value)
		} else {
			require.Equal(t, time.Time{}, nb, "%q", tc.value)
		}
	}
}
