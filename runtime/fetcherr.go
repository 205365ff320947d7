package runtime

import (
	"context"
	"errors"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
)

// fetchErrors logs a poll's fetch errors, except its own cancellation, each kind of a partition's
// at most once every fetchErrEvery (fetchErrLog), with how many it did not log since. A static
// member fenced by another member with its instance id (franz-go reports the group session's
// FENCED_INSTANCE_ID as a fetch error) fails the App with ErrInstanceFenced, and the client leaves
// the group at once, so that franz-go's group loop does not join again and fence that member in
// turn.
func (c *consumer) fetchErrors(fs kgo.Fetches) {
	fs.EachError(func(topic string, partition int32, err error) {
		if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
			return
		}
		if errors.Is(err, kerr.FencedInstanceID) {
			c.instanceFenced(c.cl, err)
			return
		}
		if repeated, ok := c.fetchErrs.due(fetchErrKey{tp{topic, partition}, errKind(err)}, time.Now()); ok {
			kv := []any{"topic", topic, "partition", partition, "err", err}
			if repeated > 0 {
				kv = append(kv, "repeated", repeated)
			}
			c.log.Warn("tidemark: fetch error", kv...)
		}
	})
}

// fetchErrEvery is how often a partition's fetch errors are logged while they go on: franz-go
// fetches again at once after some (TOPIC_AUTHORIZATION_FAILED: helper-141 counted 12,000 lines a
// second on kfake, one per fetch).
const fetchErrEvery = 10 * time.Second

// fetchErrLog keeps a subscription's fetch error lines to one per partition and kind of error
// (errKind; the group loop's errors come with no topic) every fetchErrEvery; the zero value is
// ready. It keeps an entry per partition and kind ever seen: a few per partition.
type fetchErrLog struct {
	mu   sync.Mutex
	last map[fetchErrKey]fetchErrSeen
}

// fetchErrKey is what fetchErrLog spaces the lines of: one partition's one kind of error (a new
// kind is logged at once, helper-143).
type fetchErrKey struct {
	tp
	kind string // errKind
}

// errKind is err's Kafka error code name, or "" for an error without one (a dial error's text
// changes from one try to the next: helper-144 saw a new line per try), so that the kinds, and
// fetchErrLog's entries, are a few per partition.
func errKind(err error) string {
	if ke := (*kerr.Error)(nil); errors.As(err, &ke) {
		return ke.Message
	}
	return ""
}

type fetchErrSeen struct {
	at    time.Time // when its last line was logged
	muted int       // errors since, not logged
}

// due reports whether a line for an error of k at now is due, and how many of k's errors went
// unlogged since the last line.
func (l *fetchErrLog) due(k fetchErrKey, now time.Time) (repeated int, ok bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.last == nil {
		l.last = make(map[fetchErrKey]fetchErrSeen)
	}
	seen, known := l.last[k]
	if known && now.Sub(seen.at) < fetchErrEvery {
		seen.muted++
		l.last[k] = seen
		return 0, false
	}
	l.last[k] = fetchErrSeen{at: now}
	return seen.muted, true
}
