package conformance

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// A violation is one broken invariant, with what shows it.
type violation struct {
	invariant string
	detail    string
}

// maxReported bounds the violations reported per invariant.
const maxReported = 10

// check verifies the invariants of a finished run (every member stopped, everything committed)
// and fails the test naming each violation.
func (r *chaosRun) check() {
	t := r.t
	var vs []violation
	add := func(inv, format string, args ...any) {
		vs = append(vs, violation{inv, fmt.Sprintf(format, args...)})
	}
	r.mu.Lock()
	exits, wentBack := slices.Clone(r.exits), slices.Clone(r.wentBack)
	r.mu.Unlock()
	for _, e := range exits {
		add("a graceful stop ends cleanly", "%s", e)
	}
	for _, w := range wentBack {
		add("the group's committed offsets never go back", "%s", w)
	}

	// What the input topic holds under read_committed: the inputs and the committed retry copies.
	// Aborted inputs, aborted copies and markers are not in it.
	type tp struct {
		p   int32
		off int64
	}
	valueAt := map[tp]string{}
	required := map[int32][]int64{} // per partition, the offsets of data records, ascending
	for _, rec := range r.c.ReadAll(t, chaosIn, true) {
		valueAt[tp{rec.Partition, rec.Offset}] = string(rec.Value)
		required[rec.Partition] = append(required[rec.Partition], rec.Offset)
	}

	r.mu.Lock()
	procs, inputs := slices.Clone(r.procs), slices.Clone(r.inputs)
	r.mu.Unlock()
	logs := make([][]kfaketest.Event, len(procs))
	events := 0
	for i, p := range procs {
		logs[i] = p.Events()
		events += len(logs[i])
	}

	// Handlers see only committed data: never an aborted record, never a marker.
	seenAborted := 0
	for slot, evs := range logs {
		for _, ev := range evs {
			if ev.Kind != kfaketest.EventStart {
				continue
			}
			if _, ok := valueAt[tp{ev.Partition, ev.Offset}]; !ok {
				if seenAborted++; seenAborted <= maxReported {
					add("handlers see only committed data", "slot %d run %d handled partition %d offset %d, which read_committed does not hold", slot, ev.Run, ev.Partition, ev.Offset)
				}
			}
		}
	}

	if r.cfg.Txn {
		vs = append(vs, r.checkExactlyOnce(inputs)...)
	} else {
		// None lost: every input ends with an ack or a drop, of itself or of one of its copies.
		ended := map[string]bool{}
		for _, evs := range logs {
			for _, ev := range evs {
				if ev.Kind == kfaketest.EventReturn && (ev.Outcome == outAck || ev.Outcome == outDrop) {
					ended[valueAt[tp{ev.Partition, ev.Offset}]] = true
				}
			}
		}
		lost := 0
		for _, id := range inputs {
			if !ended[id] {
				if lost++; lost <= maxReported {
					add("every record is handled (none lost)", "input %s never ended in an ack or a drop", id)
				}
			}
		}
		if lost > maxReported {
			add("every record is handled (none lost)", "... %d inputs lost in all", lost)
		}
		vs = append(vs, checkCommits(logs, required, r.groupCommits())...)
	}

	t.Logf("chaos: checked %d inputs, %d committed records in %s, %d events over %d member slots, %d commits",
		len(inputs), len(valueAt), chaosIn, events, len(procs), len(r.groupCommits()))
	if len(vs) == 0 {
		return
	}
	var b strings.Builder
	for _, v := range vs {
		fmt.Fprintf(&b, "\n  %s: %s", v.invariant, v.detail)
	}
	t.Errorf("chaos: seed %d broke %d invariant checks:%s", r.cfg.Seed, len(vs), b.String())
}

// groupCommits returns the commit log's entries for the run's group and input topic, in order.
func (r *chaosRun) groupCommits() []kfaketest.Commit {
	var out []kfaketest.Commit
	for _, cm := range r.c.CommitLog().All() {
		if cm.Group == chaosGroup && cm.Topic == chaosIn {
			out = append(out, cm)
		}
	}
	return out
}

// checkCommits checks the Tracked commit invariants against the group's commits, in log order:
//
//   - No commit passes a record whose handler had not returned when the commit arrived. Each
//     member's event log holds, in the order they happened, its handlers' returns and a note per
//     commit, written by the parent as the cluster received the commit (CommitLog.OnCommit). A
//     return logged before a commit's note was logged before the commit arrived; a member writes a
//     return before its handler returns, so before the runtime can complete the record, mark it
//     and send the commit. For each record, the first commit that saw it settled is the earliest
//     note following its first settling return (ack, drop, or a retry copy made) in any member's
//     log; every commit at or past the record's offset + 1 must come at or after that one.
//   - A member never asks, within one generation, for a partition's commit to go back. Across
//     members the requests may go back: a member the group moved on without (a zombie, which does
//     not know yet) asks for what it handled, and the broker rejects it. What the group holds is
//     watched by monitorCommitted instead.
func checkCommits(logs [][]kfaketest.Event, required map[int32][]int64, commits []kfaketest.Commit) []violation {
	var vs []violation
	type tp struct {
		p   int32
		off int64
	}
	seen := map[tp]int{} // the first commit seq that saw the record settled
	seenBy := map[tp]string{}
	for slot, evs := range logs {
		var pending []tp // settled in this log since the last note
		firstSettle := map[tp]bool{}
		for _, ev := range evs {
			switch {
			case ev.Kind == kfaketest.EventReturn && settles(ev.Outcome):
				k := tp{ev.Partition, ev.Offset}
				if !firstSettle[k] {
					firstSettle[k] = true
					pending = append(pending, k)
				}
			case ev.Kind == kfaketest.EventNote && ev.Run == 0 && ev.Note == "commit":
				seq, err := strconv.Atoi(ev.Text)
				if err != nil {
					return []violation{{"commit notes are readable", fmt.Sprintf("slot %d: note %+v", slot, ev)}}
				}
				for _, k := range pending {
					if s, ok := seen[k]; !ok || seq < s {
						seen[k] = seq
						seenBy[k] = fmt.Sprintf("slot %d", slot)
					}
				}
				pending = pending[:0]
			}
		}
	}
	// Per partition, the latest "first seen" seq over every record up to each offset.
	type prefix struct {
		offsets []int64
		maxSeq  []int   // maxSeq[i]: the latest first-seen seq over offsets[0..i]; MaxInt if one never was
		culprit []int64 // the offset that sets maxSeq[i]
	}
	prefixes := map[int32]prefix{}
	for p, offs := range required {
		px := prefix{offsets: offs, maxSeq: make([]int, len(offs)), culprit: make([]int64, len(offs))}
		cur, who := -1, int64(-1)
		for i, o := range offs {
			s, ok := seen[tp{p, o}]
			if !ok {
				s = math.MaxInt
			}
			if s > cur {
				cur, who = s, o
			}
			px.maxSeq[i], px.culprit[i] = cur, who
		}
		prefixes[p] = px
	}
	passed := 0
	type owner struct {
		member string
		gen    int32
		p      int32
	}
	last := map[owner]kfaketest.Commit{}
	back := 0
	for _, cm := range commits {
		k := owner{cm.Member, cm.Generation, cm.Partition}
		if prev, ok := last[k]; ok && cm.Offset < prev.Offset {
			if back++; back <= maxReported {
				vs = append(vs, violation{"the commits of a partition never go back", fmt.Sprintf(
					"partition %d: member %s (instance %q) asked in generation %d for %d (commit seq %d) after %d (seq %d)",
					cm.Partition, cm.Member, cm.InstanceID, cm.Generation, cm.Offset, cm.Seq, prev.Offset, prev.Seq)})
			}
		}
		last[k] = cm
		px := prefixes[cm.Partition]
		i, _ := slices.BinarySearch(px.offsets, cm.Offset) // offsets below cm.Offset: px.offsets[:i]
		if i == 0 || px.maxSeq[i-1] <= cm.Seq {
			continue
		}
		if passed++; passed <= maxReported {
			bad := px.culprit[i-1]
			when := "no member's handler ever returned a settling outcome for it"
			if s := px.maxSeq[i-1]; s != math.MaxInt {
				when = fmt.Sprintf("its handler's first settling return (%s) was logged before commit seq %d only", seenBy[tp{cm.Partition, bad}], s)
			}
			vs = append(vs, violation{"no commit passes a record whose handler had not returned", fmt.Sprintf(
				"partition %d: commit seq %d (member %s, instance %q, generation %d) asked for %d, past offset %d: %s",
				cm.Partition, cm.Seq, cm.Member, cm.InstanceID, cm.Generation, cm.Offset, bad, when)})
		}
	}
	if passed > maxReported {
		vs = append(vs, violation{"no commit passes a record whose handler had not returned", fmt.Sprintf("... %d commits in all", passed)})
	}
	return vs
}

// checkExactlyOnce checks the Transactional invariant: under read_committed the output holds
// exactly one output per input.
func (r *chaosRun) checkExactlyOnce(inputs []string) []violation {
	var vs []violation
	counts := map[string]int{}
	for _, rec := range r.c.ReadAll(r.t, chaosOut, true) {
		counts[string(rec.Value)]++
	}
	want := map[string]bool{}
	bad := 0
	for _, id := range inputs {
		want[id] = true
		if n := counts[id]; n != 1 {
			if bad++; bad <= maxReported {
				vs = append(vs, violation{"exactly one output per input under read_committed", fmt.Sprintf("input %s has %d outputs", id, n)})
			}
		}
	}
	for _, id := range slices.Sorted(maps.Keys(counts)) {
		if !want[id] {
			if bad++; bad <= maxReported {
				vs = append(vs, violation{"exactly one output per input under read_committed", fmt.Sprintf("output %s (%d times) is no input's", id, counts[id])})
			}
		}
	}
	if bad > maxReported {
		vs = append(vs, violation{"exactly one output per input under read_committed", fmt.Sprintf("... %d outputs wrong in all", bad)})
	}
	return vs
}

func formatAt(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.Format("15:04:05.000")
}

// keep writes what a failed run saw under dir, for a post-mortem: the configuration, every member
// slot's events and output, the commit log, and the input and output topics read_committed and
// read_uncommitted. Errors are logged, not fatal.
func (r *chaosRun) keep(dir string) {
	t := r.t
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Logf("chaos: keep: %v", err)
		return
	}
	write := func(name string, fn func(w io.Writer)) {
		f, err := os.Create(filepath.Join(dir, name))
		if err != nil {
			t.Logf("chaos: keep: %v", err)
			return
		}
		defer f.Close()
		fn(f)
	}
	write("config.txt", func(w io.Writer) { fmt.Fprintln(w, r.cfg) })
	r.mu.Lock()
	procs := slices.Clone(r.procs)
	r.mu.Unlock()
	for slot, p := range procs {
		write(fmt.Sprintf("slot-%d-events.jsonl", slot), func(w io.Writer) {
			enc := json.NewEncoder(w)
			for _, ev := range p.Events() {
				_ = enc.Encode(ev)
			}
		})
		write(fmt.Sprintf("slot-%d-output.txt", slot), func(w io.Writer) { io.WriteString(w, p.Output()) })
	}
	write("commits.jsonl", func(w io.Writer) {
		enc := json.NewEncoder(w)
		r.mu.Lock()
		seenAt := maps.Clone(r.seenAt)
		r.mu.Unlock()
		for _, cm := range r.c.CommitLog().All() {
			_ = enc.Encode(struct {
				kfaketest.Commit
				At string `json:",omitempty"` // when the cluster received it
			}{cm, formatAt(seenAt[cm.Seq])})
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, topic := range []string{chaosIn, chaosOut} {
		for _, committed := range []bool{true, false} {
			recs, err := r.c.ReadAllContext(ctx, topic, committed)
			name := fmt.Sprintf("%s-%s.txt", topic, map[bool]string{true: "committed", false: "uncommitted"}[committed])
			write(name, func(w io.Writer) {
				if err != nil {
					fmt.Fprintln(w, "error:", err)
				}
				for _, rec := range recs {
					fmt.Fprintf(w, "%d\t%d\t%s\t%s", rec.Partition, rec.Offset, rec.Key, rec.Value)
					for _, h := range rec.Headers {
						fmt.Fprintf(w, "\t%s=%s", h.Key, h.Value)
					}
					fmt.Fprintln(w)
				}
			})
		}
	}
	t.Logf("chaos: kept the run in %s", dir)
}
