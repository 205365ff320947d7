package kfaketest

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/twmb/franz-go/pkg/kgo"
)

// childEnvVar carries the JSON-encoded childSpec from Spawn to the re-executed test binary.
const childEnvVar = "TIDEMARK_KFAKETEST_CHILD"

// childSpec is what the parent tells a child.
type childSpec struct {
	Brokers    []string          `json:"brokers"`
	Args       map[string]string `json:"args"`
	Run        int               `json:"run"`
	InstanceID string            `json:"instance_id"`
	EventsPath string            `json:"events_path"`
	Connected  bool              `json:"connected,omitempty"` // the parent's Cluster came from Connect
	TermPath   string            `json:"term_path"`           // created by ChildEnv.Context once SIGTERM is handled
}

// The kinds of Event.
const (
	EventStart  = "start"  // EventLog.Start: a handler began work on a record
	EventReturn = "return" // EventLog.Return: a handler returned for a record
	EventNote   = "note"   // EventLog.Note: a free-form marker
)

// An Event is one line of a child's event log, as Process.Events reads it back.
type Event struct {
	Run       int    `json:"run"`  // the run that wrote it: 1 for the first start, +1 per Restart; 0 for Process.Note
	Kind      string `json:"kind"` // EventStart, EventReturn or EventNote
	Topic     string `json:"topic,omitempty"`
	Partition int32  `json:"partition"`
	Offset    int64  `json:"offset"`
	Attempt   int    `json:"attempt,omitempty"` // for EventStart: the delivery attempt, from 1
	Outcome   string `json:"outcome,omitempty"` // for EventReturn: what the handler returned, free-form ("ack", "retry", ...)
	Note      string `json:"note,omitempty"`    // for EventNote: the kind given to Note, e.g. "ready"
	Text      string `json:"text,omitempty"`    // for EventNote: the text given to Note
	Seq       int    `json:"-"`                 // position in the log over all runs, from 0; set when read back
}

// ChildEnv is what a child process gets from Child: where the cluster is, the arguments the parent
// passed to Spawn, which run this is, and the log to write events to.
type ChildEnv struct {
	Brokers    []string          // the cluster's seed addresses
	Args       map[string]string // as given to Spawn; never nil
	Run        int               // 1 for the first start, +1 per Restart
	InstanceID string            // stable across restarts of one Spawn: pass it to kgo.InstanceID to rejoin at once
	Log        *EventLog         // the event log the parent reads
	Connected  bool              // the parent's Cluster came from Connect: real brokers

	termPath string
}

// ClientOpts returns kgo.SeedBrokers(e.Brokers...) followed by FastOpts (with
// ConnectedSessionTimeout when the parent's cluster is connected); nothing group-specific.
func (e ChildEnv) ClientOpts() []kgo.Opt {
	opts := append([]kgo.Opt{kgo.SeedBrokers(e.Brokers...)}, FastOpts()...)
	if e.Connected {
		opts = append(opts, kgo.SessionTimeout(ConnectedSessionTimeout))
	}
	return opts
}

// Context returns a context cancelled when the parent calls Process.Terminate (SIGTERM): run the
// consumer until it ends, then stop gracefully and return. Process.Terminate waits until the
// child has called Context before it signals, so a Terminate right after Spawn or Restart is
// never a crash. Call stop to restore SIGTERM's default. It panics if it cannot tell the parent.
func (e ChildEnv) Context() (ctx context.Context, stop context.CancelFunc) {
	ctx, stop = notifyTerm(context.Background())
	if e.termPath != "" {
		if err := os.WriteFile(e.termPath, nil, 0o600); err != nil {
			stop()
			panic(fmt.Sprintf("kfaketest: ChildEnv.Context: %v", err))
		}
	}
	return ctx, stop
}

// Child reports whether this process is a child started by Cluster.Spawn, and if so returns its
// environment. Call it first in the test that spawns: in the child, the same test runs again,
// and it must run the consumer and return instead of starting a cluster. In a subtest, the
// enclosing tests run in the child too, so they should do nothing else before t.Run. It panics if
// the environment Spawn set is malformed or the event log cannot be opened.
func Child() (ChildEnv, bool) {
	raw, ok := os.LookupEnv(childEnvVar)
	if !ok {
		return ChildEnv{}, false
	}
	var spec childSpec
	if err := json.Unmarshal([]byte(raw), &spec); err != nil {
		panic(fmt.Sprintf("kfaketest: Child: bad %s: %v", childEnvVar, err))
	}
	f, err := os.OpenFile(spec.EventsPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE|os.O_SYNC, 0o600)
	if err != nil {
		panic(fmt.Sprintf("kfaketest: Child: open event log: %v", err))
	}
	if spec.Args == nil {
		spec.Args = map[string]string{}
	}
	return ChildEnv{
		Brokers:    spec.Brokers,
		Args:       spec.Args,
		Run:        spec.Run,
		InstanceID: spec.InstanceID,
		Log:        &EventLog{f: f, run: spec.Run},
		Connected:  spec.Connected,
		termPath:   spec.TermPath,
	}, true
}

// An EventLog is a child's record of what it handled. Each call appends one JSON line to a file
// opened with O_APPEND|O_SYNC and returns only once the line is written, so after a SIGKILL the
// parent knows exactly which calls returned. Its methods are safe for concurrent use; they panic
// if the file cannot be written (the child then crashes, which the parent sees).
type EventLog struct {
	mu  sync.Mutex
	f   *os.File
	run int
}

// Start logs that a handler began work on the record at topic/partition/offset, for the
// attempt'th time (from 1).
func (l *EventLog) Start(topic string, partition int32, offset int64, attempt int) {
	l.write(Event{Kind: EventStart, Topic: topic, Partition: partition, Offset: offset, Attempt: attempt})
}

// Return logs that a handler returned outcome (free-form: "ack", "drop", "retry", ...) for the
// record at topic/partition/offset.
func (l *EventLog) Return(topic string, partition int32, offset int64, outcome string) {
	l.write(Event{Kind: EventReturn, Topic: topic, Partition: partition, Offset: offset, Outcome: outcome})
}

// Note logs a free-form marker, such as Note("ready", "") once the consumer has joined.
func (l *EventLog) Note(kind, text string) {
	l.write(Event{Kind: EventNote, Note: kind, Text: text})
}

func (l *EventLog) write(e Event) {
	e.Run = l.run
	b, err := json.Marshal(e)
	if err != nil {
		panic(fmt.Sprintf("kfaketest: EventLog: %v", err))
	}
	b = append(b, '\n')
	l.mu.Lock()
	defer l.mu.Unlock()
	if _, err := l.f.Write(b); err != nil {
		panic(fmt.Sprintf("kfaketest: EventLog: %v", err))
	}
}

// readEvents parses an event log. A last line without its newline (a write cut by a kill
// cannot produce one with O_APPEND|O_SYNC on a local file, but be safe) is ignored.
func readEvents(path string) ([]Event, error) {
	f, err := os.Open(path)
	if os.IsNotExist(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var evs []Event
	r := bufio.NewReader(f)
	for {
		line, err := r.ReadBytes('\n')
		if errors.Is(err, io.EOF) { // with a partial line or none
			return evs, nil
		}
		if err != nil {
			return evs, err
		}
		var e Event
		if err := json.Unmarshal(line, &e); err != nil {
			return evs, fmt.Errorf("event %d: %w", len(evs), err)
		}
		e.Seq = len(evs)
		evs = append(evs, e)
	}
}
