package main

import (
	"errors"
	"sync/atomic"

	"github.com/tidemark-io/tidemark/runtime"
)

// Counts is what one subscription's records came to, from the runtime's Settled events.
type Counts struct {
	Records      int64 // records settled for good: Acked + Dropped + Malformed + Spent + Lost
	Handled      int64 // deliveries the handler (or its adapter) got, retry copies included
	Acked        int64 // the handler returned nil
	Dropped      int64 // the handler returned Drop (sent to the dead-letter topic when one is declared)
	Malformed    int64 // the value did not decode (sent to the dead-letter topic when one is declared)
	Retried      int64 // failed deliveries that are handled again: retry copies and in-place retries
	Spent        int64 // failed maxAttempts times (sent to the dead-letter topic when one is declared)
	DeadLettered int64 // dead-letter records acknowledged: dropped, malformed and spent ones
	Lost         int64 // a retry refused under Auto (ErrRetryUnsupported): never handled again
}

// A tally counts one subscription's Settled events; lanes update it concurrently.
type tally struct {
	outcomes [16]atomic.Int64 // by runtime.Outcome
	// A dead letter is one outcome whatever sent the record there; these say why.
	deadDropped, deadMalformed, deadSpent atomic.Int64
}

// settled counts e, and for a dead letter, why it went there: its error wraps ErrDecode (malformed),
// errBankUnavailable (a retry cause, so its attempts were spent) or a drop's reason.
func (t *tally) settled(e runtime.SettledEvent) {
	if int(e.Outcome) >= len(t.outcomes) {
		return
	}
	t.outcomes[e.Outcome].Add(1)
	if e.Outcome != runtime.OutcomeDeadLetter {
		return
	}
	switch {
	case errors.Is(e.Err, runtime.ErrDecode):
		t.deadMalformed.Add(1)
	case errors.Is(e.Err, errBankUnavailable): // a retry cause: only spent retries reach the DLQ
		t.deadSpent.Add(1)
	default:
		t.deadDropped.Add(1)
	}
}

// counts returns the tally so far.
func (t *tally) counts() Counts {
	n := func(o runtime.Outcome) int64 { return t.outcomes[o].Load() }
	c := Counts{
		Acked:        n(runtime.OutcomeAck),
		Dropped:      n(runtime.OutcomeDrop) + t.deadDropped.Load(),
		Malformed:    n(runtime.OutcomeDecodeFailure) + t.deadMalformed.Load(),
		Retried:      n(runtime.OutcomeRetryCopy) + n(runtime.OutcomeRetry),
		Spent:        n(runtime.OutcomeSpent) + t.deadSpent.Load(),
		DeadLettered: n(runtime.OutcomeDeadLetter),
		Lost:         n(runtime.OutcomeRetryRefused),
	}
	c.Records = c.Acked + c.Dropped + c.Malformed + c.Spent + c.Lost
	for o := range t.outcomes {
		if o != int(runtime.OutcomeControl) && o != int(runtime.OutcomeForeignCopy) {
			c.Handled += t.outcomes[o].Load()
		}
	}
	return c
}

// An observer is the demo's runtime.Observer: it counts Settled events per consumer group (each
// subscription has its own) and ignores the other events.
type observer struct {
	runtime.NopObserver
	byGroup map[string]*tally // fixed by newObserver, so lanes read it without a lock
}

// newObserver returns an observer that counts the Settled events of groups.
func newObserver(groups ...string) *observer {
	o := &observer{byGroup: map[string]*tally{}}
	for _, g := range groups {
		o.byGroup[g] = &tally{}
	}
	return o
}

// Settled counts e. It runs on a lane: it only adds to atomics.
func (o *observer) Settled(e runtime.SettledEvent) {
	if t := o.byGroup[e.Group]; t != nil {
		t.settled(e)
	}
}

// counts returns group's counts so far.
func (o *observer) counts(group string) Counts {
	if t := o.byGroup[group]; t != nil {
		return t.counts()
	}
	return Counts{}
}
