package retry

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestDefaultBackoffDoublesFrom100msTo30s(t *testing.T) {
	b := Default()
	err := errors.New("x")
	want := []time.Duration{100 * time.Millisecond, 200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond}
	for i, w := range want {
		require.Equal(t, w, b(i+1, err), "attempt %d", i+1)
	}
	require.Equal(t, 25600*time.Millisecond, b(9, err))
	require.Equal(t, 30*time.Second, b(10, err))
	require.Equal(t, 30*time.Second, b(1000, err), "no overflow past max")
	require.Equal(t, 100*time.Millisecond, b(0, err), "attempt below 1 reads as 1")
}

func TestCountReadsTheRetryCountHeader(t *testing.T) {
	h := func(vs ...string) *kgo.Record {
		r := &kgo.Record{Headers: []kgo.RecordHeader{{Key: "user", Value: []byte("7")}}}
		for _, v := range vs {
			r.Headers = append(r.Headers, kgo.RecordHeader{Key: CountHeader, Value: []byte(v)})
		}
		return r
	}
	cases := []struct {
		name string
		rec  *kgo.Record
		want int
	}{
		{"an original has no header and reads 0", h(), 0},
		{"the first copy reads 1", h("1"), 1},
		{"a large count", h("42"), 42},
		{"malformed reads 0", h("x1"), 0},
		{"negative reads 0", h("-3"), 0},
		{"empty reads 0", h(""), 0},
		{"a sign reads 0", h("+1"), 0},
		{"a space reads 0", h(" 1"), 0},
		{"an exponent reads 0", h("1e3"), 0},
		{"past int64 reads MaxCount, as past MaxCount does", h("99999999999999999999"), MaxCount},
		{"MaxCount exactly", h("2147483647"), MaxCount},
		{"one below MaxCount", h("2147483646"), MaxCount - 1},
		{"leading zeros", h("007"), 7},
		{"the last header counts, even malformed", h("2", "abc"), 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { require.Equal(t, c.want, Count(c.rec)) })
	}
}
