package kfaketest

import (
	"context"
	"fmt"
	"sync"
	"testing"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"
)

// A Commit is one partition of one OffsetCommit or TxnOffsetCommit request, as the cluster
// received it.
type Commit struct {
	Group       string // the consumer group
	Member      string // the member id the request carried; "" for admin (kadm) commits
	InstanceID  string // the static member id, "" if none
	TxnID       string // the transactional id, for TxnOffsetCommit; "" otherwise
	Generation  int32  // the generation (classic) or member epoch the request carried; -1 for admin commits
	Topic       string
	Partition   int32
	Offset      int64 // the next offset to consume, as committed
	LeaderEpoch int32 // the leader epoch the request carried, -1 if none
	Txn         bool  // a TxnOffsetCommit: staged in a transaction, visible only if it commits
	Seq         int   // position in the cluster's commit log, from 0, over all groups
}

// A CommitLog records every OffsetCommit and TxnOffsetCommit request a Cluster receives, one
// Commit per partition, in the order the cluster handles them. It records requests, not
// outcomes: a commit the broker then rejects (a FailCommit fault, a stale generation, an
// unknown member) is in the log too, and a transactional commit is logged when it is sent, not
// when its transaction ends. Use Cluster.Committed for what the group holds.
type CommitLog struct {
	k       *kfake.Cluster
	closing context.Context // its Cluster's: done once Close begins, which ends the waits

	mu      sync.Mutex
	commits []Commit
	changed chan struct{} // closed and replaced on every append
	topics  map[[16]byte]string
	hooks   map[int]func(Commit) // OnCommit functions, by registration number
	nhooks  int
}

func newCommitLog(k *kfake.Cluster, closing context.Context) *CommitLog {
	return &CommitLog{k: k, closing: closing, changed: make(chan struct{}), topics: make(map[[16]byte]string)}
}

// install adds one observing control per request key. kfake runs the controls of a key in the
// order they were added and passes an unhandled request on to the next control and then to the
// broker, so these coexist with the user's controls and with faults (which kfake checks after
// every control declined).
func (l *CommitLog) install() {
	l.k.ControlKey(int16(kmsg.OffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		l.k.KeepControl()
		l.recordOffsetCommit(req.(*kmsg.OffsetCommitRequest))
		return nil, nil, false
	})
	l.k.ControlKey(int16(kmsg.TxnOffsetCommit), func(req kmsg.Request) (kmsg.Response, error, bool) {
		l.k.KeepControl()
		l.recordTxnOffsetCommit(req.(*kmsg.TxnOffsetCommitRequest))
		return nil, nil, false
	})
}

func (l *CommitLog) recordOffsetCommit(req *kmsg.OffsetCommitRequest) {
	base := Commit{
		Group:      req.Group,
		Member:     req.MemberID,
		InstanceID: deref(req.InstanceID),
		Generation: req.Generation,
	}
	if req.Version < 1 {
		base.Generation = -1
	}
	var cs []Commit
	for _, t := range req.Topics {
		topic := l.topicName(t.Topic, t.TopicID)
		for _, p := range t.Partitions {
			c := base
			c.Topic, c.Partition, c.Offset, c.LeaderEpoch = topic, p.Partition, p.Offset, p.LeaderEpoch
			if req.Version < 6 {
				c.LeaderEpoch = -1
			}
			cs = append(cs, c)
		}
	}
	l.append(cs)
}

func (l *CommitLog) recordTxnOffsetCommit(req *kmsg.TxnOffsetCommitRequest) {
	base := Commit{
		Group:      req.Group,
		Member:     req.MemberID,
		InstanceID: deref(req.InstanceID),
		TxnID:      req.TransactionalID,
		Generation: req.Generation,
		Txn:        true,
	}
	if req.Version < 3 {
		base.Generation = -1
	}
	var cs []Commit
	for _, t := range req.Topics {
		topic := l.topicName(t.Topic, t.TopicID)
		for _, p := range t.Partitions {
			c := base
			c.Topic, c.Partition, c.Offset, c.LeaderEpoch = topic, p.Partition, p.Offset, p.LeaderEpoch
			if req.Version < 2 {
				c.LeaderEpoch = -1
			}
			cs = append(cs, c)
		}
	}
	l.append(cs)
}

// topicName resolves the topic ID that OffsetCommit v10+ and TxnOffsetCommit v6+ carry instead
// of a name. It runs inside a control, where kfake still serves admin calls such as
// TopicIDInfo. An unknown ID is logged as "<unknown topic id ...>".
func (l *CommitLog) topicName(name string, id [16]byte) string {
	if name != "" || id == [16]byte{} {
		return name
	}
	l.mu.Lock()
	name, ok := l.topics[id]
	l.mu.Unlock()
	if ok {
		return name
	}
	info := l.k.TopicIDInfo(id)
	if info == nil {
		return fmt.Sprintf("<unknown topic id %x>", id)
	}
	l.mu.Lock()
	l.topics[id] = info.Topic
	l.mu.Unlock()
	return info.Topic
}

func (l *CommitLog) append(cs []Commit) {
	if len(cs) == 0 {
		return
	}
	l.mu.Lock()
	for i := range cs {
		cs[i].Seq = len(l.commits)
		l.commits = append(l.commits, cs[i])
	}
	close(l.changed)
	l.changed = make(chan struct{})
	hooks := make([]func(Commit), 0, len(l.hooks))
	for i := range l.nhooks {
		if fn, ok := l.hooks[i]; ok {
			hooks = append(hooks, fn)
		}
	}
	l.mu.Unlock()
	for _, c := range cs {
		for _, fn := range hooks {
			fn(c)
		}
	}
}

// OnCommit calls fn with every commit logged from now on, in order, as the cluster receives the
// request: before the cluster handles it, so before any client can see its effect. fn runs on
// the cluster's request loop and blocks it: it must be quick, and it must not call the
// cluster's clients or wait on anything they do (it may call the CommitLog's methods, Process.Note
// and other local work). remove stops the calls; after it returns fn is not called again, unless
// a call was already under way.
//
// Use it to order commits against another process's events: a Process.Note written from fn lands
// in the child's event log after every event the child logged before the commit was sent.
func (l *CommitLog) OnCommit(fn func(Commit)) (remove func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.hooks == nil {
		l.hooks = make(map[int]func(Commit))
	}
	id := l.nhooks
	l.nhooks++
	l.hooks[id] = fn
	return func() {
		l.mu.Lock()
		defer l.mu.Unlock()
		delete(l.hooks, id)
	}
}

// All returns a copy of every commit logged so far, in order (Seq 0, 1, ...).
func (l *CommitLog) All() []Commit {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]Commit(nil), l.commits...)
}

// Of returns, in order, the commits logged so far for one group's partition.
func (l *CommitLog) Of(group, topic string, partition int32) []Commit {
	return filterCommits(l.All(), group, topic, partition)
}

func filterCommits(all []Commit, group, topic string, partition int32) []Commit {
	var out []Commit
	for _, c := range all {
		if c.Group == group && c.Topic == topic && c.Partition == partition {
			out = append(out, c)
		}
	}
	return out
}

// Wait blocks until cond returns true for the whole log (All), failing the test after
// WaitTimeout (30s) with the last commits seen. cond runs each time the log grows; it must not
// retain or modify its argument.
func (l *CommitLog) Wait(t testing.TB, cond func([]Commit) bool) {
	t.Helper()
	ctx, cancel := opCtx(t)
	defer cancel()
	if err := l.WaitContext(ctx, cond); err != nil {
		t.Fatalf("kfaketest: CommitLog.Wait: %v; last commits: %s", err, tailCommits(l.All(), 20))
	}
}

// WaitContext is Wait for programs: it returns nil once cond holds, or ctx's error, or ErrClosed
// once the Cluster is closing (at once on a closed one, unless cond already holds for the log).
func (l *CommitLog) WaitContext(ctx context.Context, cond func([]Commit) bool) error {
	for {
		l.mu.Lock()
		cs, changed := append([]Commit(nil), l.commits...), l.changed
		l.mu.Unlock()
		if cond(cs) {
			return nil
		}
		if err := ctx.Err(); err != nil { // as the other helpers: ctx's error first (usable)
			return err
		}
		if l.closing.Err() != nil {
			return ErrClosed
		}
		select {
		case <-changed:
		case <-ctx.Done():
		case <-l.closing.Done():
		}
	}
}

func tailCommits(cs []Commit, n int) string {
	if len(cs) > n {
		return fmt.Sprintf("(%d earlier) %+v", len(cs)-n, cs[len(cs)-n:])
	}
	return fmt.Sprintf("%+v", cs)
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}

// CommitLog returns the cluster's commit log. It is recording from the moment New or Start
// returns. It panics with ErrKfakeOnly on a connected cluster.
func (c *Cluster) CommitLog() *CommitLog {
	c.kfakeOnly("CommitLog")
	return c.log
}
