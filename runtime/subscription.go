package runtime

import (
	"fmt"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kgo"
)

// A CommitMode says how a subscription turns outcomes into committed offsets (DESIGN §3.2). The
// zero value is Auto.
type CommitMode struct {
	kind  modeKind
	txnID string
}

type modeKind uint8

const (
	modeAuto modeKind = iota
	modeTracked
	modeTxn
)

var (
	// Auto marks each record once its handler has returned and lets franz-go's autocommit commit
	// the marks every AutoCommitInterval: the cheapest mode. No tracker: under ByKey and Unordered
	// a mark may pass records still in flight, which a crash can then lose; a retry is refused.
	// The default.
	Auto = CommitMode{kind: modeAuto}

	// Tracked commits, per partition, the lowest offset still in flight (or the highest delivered
	// offset + 1 when none is): at-least-once, with in-place retries. Requires a group.
	Tracked = CommitMode{kind: modeTracked}
)

// Transactional is the exactly-once mode (DESIGN §3.4): records are consumed in windows of
// CommitInterval, and each window's consumed offsets commit in one Kafka transaction together with
// everything its handlers produced (replies, publishes made with the handler's ctx, retry copies,
// dead-letter records), or none of it does. id is the transactional id: stable per running
// instance (a pod name, not a random value), so a restarted instance fences its own zombie; a
// second live instance with the same id is fatal for the older one.
func Transactional(id string) CommitMode { return CommitMode{kind: modeTxn, txnID: id} }

// String returns "Auto", "Tracked" or `Transactional("id")`, the id quoted as %q quotes it.
func (m CommitMode) String() string {
	switch m.kind {
	case modeTracked:
		return "Tracked"
	case modeTxn:
		return fmt.Sprintf("Transactional(%q)", m.txnID)
	}
	return "Auto"
}

// A StartOffset says where a group with no committed offset starts reading a partition.
type StartOffset uint8

const (
	// Earliest starts at the log start offset (the default).
	Earliest StartOffset = iota
	// Latest starts at the high watermark as franz-go lists it when it first fetches the partition,
	// shortly after Start returns (Start returns at the first assignment): records produced before
	// that listing are skipped, even some produced just after Start returned. Where no record
	// after a point in time may be missed, start Earliest from a new group, or commit the group's
	// offsets (kadm) before the first start.
	Latest
)

// String returns "Earliest" or "Latest".
func (o StartOffset) String() string {
	if o == Latest {
		return "Latest"
	}
	return "Earliest"
}

type subKind uint8

const (
	subTopics subKind = iota
	subPattern
	subPartitions
)

// A Subscription names what a handler reads: topics (Topic, Topics), a regular expression
// (Pattern) or fixed partitions (Partitions), with its group, commit mode, start offset and extra
// client options. It is a value: each method returns a changed copy. One franz-go client serves
// each registered subscription (DESIGN §2).
type Subscription struct {
	kind       subKind
	topics     []string
	pattern    string
	partitions []int32
	group      string
	mode       CommitMode
	start      StartOffset
	opts       []kgo.Opt
	nilOpts    []int // positions (from 1) of nil options given to Config: Start reports them
	emptyGroup bool  // Group("") was its last Group: Start reports it
}

// Topic subscribes to one topic as a member of the subscription's consumer group.
func Topic(name string) Subscription { return Subscription{kind: subTopics, topics: []string{name}} }

// Topics subscribes to several topics in one group, with one handler. With two names or more, its
// registration must name where retry copies go, RetryTo(topic) or RetryToSource(), even if the
// handler never retries: Start fails with a *ConfigError otherwise (DESIGN §3.3). Topics of one
// name is Topic.
func Topics(names ...string) Subscription {
	return Subscription{kind: subTopics, topics: append([]string(nil), names...)}
}

// Pattern subscribes to every topic whose name matches regex (Go RE2 syntax, anchored: it must
// start with "^"). Topics created later join when the client next refreshes metadata, every
// kgo.MetadataMaxAge (franz-go's default 5m; set it with Config), and are read from the
// subscription's Start offset: under Latest, what was written to a new topic before the client saw
// it is skipped (helper-142: all 180 records of three new topics). Start returns once metadata has
// loaded, even if nothing matches yet. As for Topics, its registration must name RetryTo(topic) or
// RetryToSource().
//
// A pattern that matches a topic another subscription of its group reads by name (Topic, Topics,
// RetryTo), or that another pattern of its group matches among the topics the cluster has at Start,
// or that is another subscription's pattern in its group, fails Start with a *ConfigError: the
// group would split that topic's partitions between the two handlers. A topic created later that
// two different patterns of one group match is split so: keep the patterns of a group disjoint.
//
// A matched topic deleted while it is read has no offsets left to commit: a revoke's or Shutdown's
// commit logs its partitions at Warn and does not fail for them (once a broker confirms the topic
// is gone, or knows the name by another topic ID). A topic any subscription reads that is deleted
// and created again under its name fails an Auto or Tracked subscription's App with
// ErrTopicRecreated (franz-go keeps the old topic ID and never reads the new topic with that
// client); a Transactional subscription makes its session again and reads it (docs/operations.md,
// deleted and re-created topics).
func Pattern(regex string) Subscription { return Subscription{kind: subPattern, pattern: regex} }

// Partitions reads the given partitions of topic directly, without group membership (franz-go
// refuses ConsumePartitions with a group). With Group(g) it starts from g's committed offsets and
// commits into g with kadm; g must not be used by any group subscription, nor for one of these
// partitions by another Partitions subscription (a *ConfigError at Start). Tracked needs a group.
// A partition named twice, a negative one or one the topic does not have fails Start with a
// *ConfigError. Its registration must name RetryToSource() (RetryTo is for group subscriptions),
// even if the handler never retries.
func Partitions(topic string, partitions ...int32) Subscription {
	return Subscription{kind: subPartitions, topics: []string{topic}, partitions: append([]int32(nil), partitions...)}
}

// Group sets the consumer group, overriding DefaultGroup. An empty group fails Start with a
// *ConfigError (a Group(os.Getenv("GROUP")) left unset would otherwise join DefaultGroup's, or,
// for Partitions, commit nowhere, without a word).
func (s Subscription) Group(group string) Subscription {
	s.group, s.emptyGroup = group, group == ""
	return s
}

// Commit sets the commit mode (Auto by default).
func (s Subscription) Commit(m CommitMode) Subscription { s.mode = m; return s }

// Start sets where reading starts when the group has no committed offset (Earliest by default). It
// sets both franz-go's start offset and its reset offset; a committed offset always wins while it
// is in range. One out of range (below the log start once retention or DeleteRecords removed its
// records, above the end after a truncation) is reset to this start, in every mode: with Latest the
// records between are skipped, which no commit mode can prevent; Earliest reads from the log start.
// A value other than Earliest and Latest fails Start with a *ConfigError.
func (s Subscription) Start(o StartOffset) Subscription { s.start = o; return s }

// Config adds franz-go options for this subscription's client only, after the App's ClientOpts and
// before the options the commit mode owns. A nil option fails Start with a *ConfigError naming
// Config and its position among the options given to Config, from 1; so do options franz-go
// refuses (kgo.ValidateOpts: a session timeout under 100 ms, say), with franz-go's reason. A
// Transactional subscription's session produces too: kgo.ManualFlushing and
// kgo.DefaultProduceTopicAlways here fail Start as they do in ProducerOpts, and a
// kgo.DefaultProduceTopic here is where a Publish into its windows sends a record with no topic.
// kgo.ConsumeRegex (outside a Pattern), kgo.InstanceID (without runtime.InstanceID) and, outside
// the Transactional mode, kgo.TransactionalID fail Start too: Tidemark could not take them back.
func (s Subscription) Config(opts ...kgo.Opt) Subscription {
	s.opts, s.nilOpts = slices.Clone(s.opts), slices.Clone(s.nilOpts)
	for _, o := range opts {
		if o == nil { // reported by Start (a nil kgo.Opt makes franz-go panic)
			s.nilOpts = append(s.nilOpts, len(s.opts)+len(s.nilOpts)+1)
			continue
		}
		s.opts = append(s.opts, o)
	}
	return s
}

// String names the subscription by what it reads, as the user wrote that (Topic("in"),
// Pattern("^ev-"), Partitions("in", [0 1])), for errors and logs; its group, mode and other settings
// are not in it (logs carry the group and mode as attributes).
func (s Subscription) String() string {
	switch s.kind {
	case subPattern:
		return fmt.Sprintf("Pattern(%q)", s.pattern)
	case subPartitions:
		return fmt.Sprintf("Partitions(%q, %v)", s.topics[0], s.partitions)
	default:
		if len(s.topics) == 1 {
			return fmt.Sprintf("Topic(%q)", s.topics[0])
		}
		return fmt.Sprintf("Topics(%s)", strings.Join(quoteAll(s.topics), ", "))
	}
}

func quoteAll(ss []string) []string {
	out := make([]string, len(ss))
	for i, s := range ss {
		out[i] = fmt.Sprintf("%q", s)
	}
	return out
}
