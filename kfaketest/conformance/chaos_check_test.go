package conformance

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/tidemark-io/tidemark/kfaketest"
)

// The chaos runs' commit checks catch what they claim to, and only that: a commit is judged
// against the returns logged before its note, in any member's log.
func TestCheckCommits(t *testing.T) {
	ret := func(p int32, off int64, outcome string) kfaketest.Event {
		return kfaketest.Event{Run: 1, Kind: kfaketest.EventReturn, Topic: chaosIn, Partition: p, Offset: off, Outcome: outcome}
	}
	note := func(seq string) kfaketest.Event {
		return kfaketest.Event{Run: 0, Kind: kfaketest.EventNote, Note: "commit", Text: seq}
	}
	commit := func(seq int, p int32, off int64) kfaketest.Commit {
		return kfaketest.Commit{Group: chaosGroup, Topic: chaosIn, Partition: p, Offset: off, Seq: seq}
	}
	by := func(member string, gen int32, cm kfaketest.Commit) kfaketest.Commit {
		cm.Member, cm.Generation = member, gen
		return cm
	}
	required := map[int32][]int64{0: {0, 1, 3}, 1: {0}} // offset 2 of partition 0 is a marker
	cases := []struct {
		name    string
		logs    [][]kfaketest.Event
		commits []kfaketest.Commit
		want    []string // substrings of the violations, in order
	}{
		{
			name:    "commits after the returns, across members, past a marker",
			logs:    [][]kfaketest.Event{{ret(0, 0, outAck), note("0"), ret(0, 3, outDrop), note("1")}, {ret(0, 1, outRetryAfter), note("0"), note("1")}},
			commits: []kfaketest.Commit{commit(0, 0, 2), commit(1, 0, 4)},
		},
		{
			name:    "a commit that arrived before the return",
			logs:    [][]kfaketest.Event{{ret(0, 0, outAck), note("0"), ret(0, 1, outAck), note("1")}},
			commits: []kfaketest.Commit{commit(0, 0, 2), commit(1, 0, 2)},
			want:    []string{"commit seq 0 (member , instance \"\", generation 0) asked for 2, past offset 1: its handler's first settling return (slot 0) was logged before commit seq 1 only"},
		},
		{
			name:    "a retry or a panic is not a settling return",
			logs:    [][]kfaketest.Event{{ret(1, 0, outRetry), ret(1, 0, outPanic), note("0"), ret(1, 0, outAck), note("1")}},
			commits: []kfaketest.Commit{commit(0, 1, 1), commit(1, 1, 1)},
			want:    []string{"partition 1: commit seq 0"},
		},
		{
			name:    "a record never returned",
			logs:    [][]kfaketest.Event{{ret(0, 0, outAck), ret(0, 1, outAck), note("0")}},
			commits: []kfaketest.Commit{commit(0, 0, 4)},
			want:    []string{"past offset 3: no member's handler ever returned a settling outcome for it"},
		},
		{
			name:    "a member's commit that goes back within its generation",
			logs:    [][]kfaketest.Event{{ret(0, 0, outAck), ret(0, 1, outAck), note("0"), note("1"), note("2")}},
			commits: []kfaketest.Commit{by("A", 3, commit(0, 0, 2)), by("B", 3, commit(1, 0, 1)), by("A", 3, commit(2, 0, 1))},
			want:    []string{"partition 0: member A (instance \"\") asked in generation 3 for 1 (commit seq 2) after 2 (seq 0)"},
		},
		{
			name: "a zombie's request, or a new generation's, may be lower than another member's",
			logs: [][]kfaketest.Event{{ret(0, 0, outAck), ret(0, 1, outAck), ret(0, 3, outAck), note("0"), note("1"), note("2"), note("3")}},
			commits: []kfaketest.Commit{by("A", 3, commit(0, 0, 2)), by("Z", 2, commit(1, 0, 4)), by("A", 3, commit(2, 0, 3)),
				by("A", 4, commit(3, 0, 1))},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			vs := checkCommits(tc.logs, required, tc.commits)
			require.Len(t, vs, len(tc.want), "%+v", vs)
			for i, w := range tc.want {
				require.True(t, strings.Contains(vs[i].detail, w), "violation %d: %q does not contain %q", i, vs[i].detail, w)
			}
		})
	}
}

// A seed decides the same run every time, and every run ends: each outcome is bounded by the
// attempt, and the schedule never leaves the group without a member for good.
func TestChaosConfigIsAFunctionOfTheSeed(t *testing.T) {
	for seed := uint64(1); seed <= 1000; seed++ {
		c := chaosConfigFor(seed)
		require.Equal(t, c.String(), chaosConfigFor(seed).String())
		require.True(t, c.Partitions >= 1 && c.Partitions <= 8, "seed %d: %d partitions", seed, c.Partitions)
		require.True(t, c.Records >= 100 && c.Records <= 5000, "seed %d: %d records", seed, c.Records)
		produced := c.Upfront
		alive := map[int]bool{}
		for s := range c.Members {
			alive[s] = true
		}
		for _, st := range c.Steps {
			produced += st.Produce
			switch st.Action {
			case "kill", "stop":
				alive[st.Slot] = false
			case "join", "restart", "kill+restart", "stop+restart":
				alive[st.Slot] = true
			}
			n := 0
			for _, a := range alive {
				if a {
					n++
				}
			}
			require.Positive(t, n, "seed %d: no member left after %v", seed, st)
		}
		require.Equal(t, c.Records, produced, "seed %d", seed)
		for _, id := range []string{"i00000", "i00001", "i04999"} {
			for _, a := range []int{3, 4} {
				out, _ := c.decide(id, a)
				require.Contains(t, []string{outAck, outDrop}, out, "seed %d: attempt %d must end", seed, a)
			}
		}
	}
}
