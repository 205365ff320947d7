package runtime

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// recreatedMsg begins franz-go's warning for a topic deleted and created again under its name
// while a client holds it (its metadata.go): the client keeps the old topic ID and does not read
// the new topic ("the topic fails with UNKNOWN_TOPIC_ID until it is purged and re-added"). No
// fetch returns an error for it: without this warning the subscription stops reading the topic
// and says nothing.
const recreatedMsg = "metadata has a new ID for a topic we already hold"

// recreationWatch is the kgo.Logger of each of the App's clients (the consumers', the producer's):
// it passes each line to the user's own kgo.Logger (kgo.WithLogger in ClientOpts, Config or
// ProducerOpts) at the user's level, and hands franz-go's warning for a re-created topic
// (recreatedMsg) to onRecreated with the topic's name.
type recreationWatch struct {
	user        kgo.Logger // nil if the options set none
	onRecreated func(topic string)
}

// Level is the user's level, and at least Warn, the level of the warning watched.
func (w *recreationWatch) Level() kgo.LogLevel {
	if w.user == nil {
		return kgo.LogLevelWarn
	}
	return max(w.user.Level(), kgo.LogLevelWarn)
}

// Log passes the line on and watches for recreatedMsg.
func (w *recreationWatch) Log(level kgo.LogLevel, msg string, keyvals ...any) {
	if level == kgo.LogLevelWarn && strings.HasPrefix(msg, recreatedMsg) {
		for i := 0; i+1 < len(keyvals); i += 2 {
			if topic, ok := keyvals[i+1].(string); ok && keyvals[i] == "topic" {
				w.onRecreated(topic)
			}
		}
	}
	if w.user != nil && w.user.Level() >= level {
		w.user.Log(level, msg, keyvals...)
	}
}

// loggerOf returns the kgo.Logger of a probe client's options (kgo.WithLogger), or nil if they set
// none: franz-go keeps options opaque, so it is read from a client (probeOpts).
func loggerOf(cl *kgo.Client) kgo.Logger {
	l, _ := cl.OptValue(kgo.WithLogger).(kgo.Logger)
	if l != nil && l.Level() == kgo.LogLevelNone {
		return nil // franz-go's default: logs nothing
	}
	return l
}

// consumes reports whether the subscription reads topic: one of its topics, a topic its pattern
// matches and does not exclude, or its RetryTo topic.
func (c *consumer) consumes(topic string) bool {
	if c.sub.kind == subPattern && c.consumesByPattern(topic) || slices.Contains(c.sub.topics, topic) {
		return true
	}
	return topic == c.cfg.retryTo
}

// topicRecreated handles franz-go's report (recreationWatch) that a topic the consumer's client
// holds was deleted and created again. The client will never read nor write the new topic
// (franz-go advises against keeping a client alive across a re-creation: its README, "Topic
// recreation"). A Transactional subscription makes its session again once the current window has
// ended (pollTxn): its client reads the subscription's topics and writes its handlers' outputs,
// and a window that wrote to the old topic aborts. Any other subscription fails the App with
// ErrTopicRecreated for a topic it reads: the restarted App reads the new topic. franz-go never
// commits the old topic's offsets to the new one (it answers them UNKNOWN_TOPIC_ID, and
// commit.go's topicGone logs them), nor does a manual subscription (commitManual), so nothing of
// the new topic is skipped.
func (c *consumer) topicRecreated(topic string) {
	if !c.txnMode && !c.consumes(topic) {
		return
	}
	c.log.Warn("tidemark: a topic was deleted and created again", "topic", topic)
	c.recreated.CompareAndSwap(nil, &topic)
	if c.txnMode {
		return
	}
	c.app.fail(fmt.Errorf("%w: %s: topic %q, group %q: restart the App to read the new topic", ErrTopicRecreated, c.sub, topic, c.group))
}

// topicRecreated handles franz-go's report that a topic the App's producer wrote to was deleted
// and created again: the client would fail every record for it from now on, so it forgets the
// topic (kgo.Client.PurgeTopicsFromProducing, which franz-go's README, "Topic recreation", names
// for this), and writes the next records to the new one. Records it held for the old topic fail,
// as any failed write does. The purge runs apart: it waits for the metadata loop, which is the
// caller; the producer's close waits for it.
func (p *producer) topicRecreated(topic string) {
	p.app.log.Warn("tidemark: a topic the App writes to was deleted and created again; writing to the new one", "topic", topic)
	p.mu.RLock()
	cl, open := p.cl, !p.closed
	if open && cl != nil {
		p.purges.Add(1) // under mu: shut sets closed, then waits
	}
	p.mu.RUnlock()
	if open && cl != nil {
		go func() {
			defer p.purges.Done()
			cl.PurgeTopicsFromProducing(topic)
		}()
	}
}
