package runtime

import (
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kerr"
)

// A partition's fetch errors are logged at most once every fetchErrEvery, each line with how many
// were not logged since the last; each partition, and each kind of error, has its own clock.
func TestFetchErrorLinesAreSpacedPerPartition(t *testing.T) {
	var l fetchErrLog
	t0 := time.Unix(1_700_000_000, 0)
	p0, p1 := fetchErrKey{tp{"in", 0}, "A"}, fetchErrKey{tp{"in", 1}, "A"}
	p0b := fetchErrKey{tp{"in", 0}, "B"}
	type line struct {
		repeated int
		ok       bool
	}
	at := func(k fetchErrKey, d time.Duration) line {
		n, ok := l.due(k, t0.Add(d))
		return line{n, ok}
	}
	require.Equal(t, line{0, true}, at(p0, 0))
	require.Equal(t, line{0, false}, at(p0, time.Second))
	require.Equal(t, line{0, true}, at(p1, time.Second), "another partition's first")
	require.Equal(t, line{0, true}, at(p0b, time.Second), "another kind of error's first")
	require.Equal(t, line{0, false}, at(p0, fetchErrEvery-time.Nanosecond))
	require.Equal(t, line{2, true}, at(p0, fetchErrEvery))
	require.Equal(t, line{0, false}, at(p0, fetchErrEvery+time.Second))
	require.Equal(t, line{1, true}, at(p0, 3*fetchErrEvery), "one unlogged since the last line")
	require.Equal(t, line{0, true}, at(p0, 5*fetchErrEvery))
}

// A Kafka error is its code's kind; any other error, whose text may change from one try to the
// next, is one kind.
func TestFetchErrorKinds(t *testing.T) {
	require.Equal(t, "TOPIC_AUTHORIZATION_FAILED", errKind(fmt.Errorf("x: %w", kerr.TopicAuthorizationFailed)))
	require.Equal(t, "", errKind(errors.New("unable to dial: read udp 10.244.1.5:40001->10.96.0.10:53: i/o timeout")))
	require.Equal(t, "", errKind(errors.New("unable to dial: read udp 10.244.1.5:40004->10.96.0.10:53: i/o timeout")))
}
