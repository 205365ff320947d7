package conformance

import (
	"github.com/stretchr/testify/require"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/tidemark-io/tidemark/runtime"
)

// markerScenarios are DESIGN §3.7a (and §3.1's "offsets it never receives never hold the position
// back"): transaction markers and aborted records, in every mode.
func markerScenarios() []scenario {
	var out []scenario
	for _, m := range modes {
		out = append(out, scenario{
			name: "§3.7a " + m.name + ": markers and aborted records never reach handlers; lag reaches 0",
			run:  func(e *env) { markersCell(e, m) },
		})
	}
	return out
}

// Two committed records, one aborted, two committed: eight offsets (three markers). Handlers see
// the four committed records once each, in order, and the committed offset reaches 8.
func markersCell(e *env, m mode) {
	in, g := e.topic("in", 1), e.name("g")
	rec := func(v string) *kgo.Record { return &kgo.Record{Topic: in, Partition: 0, Value: []byte(v)} }
	txid := e.name("upstream")
	e.c.ProduceTxn(e, txid, true, rec("c1"), rec("c2"))
	e.c.ProduceTxn(e, txid, false, rec("aborted"))
	e.c.ProduceTxn(e, txid, true, rec("c3"), rec("c4"))
	hw := e.c.HighWatermarks(e, in)
	require.Equal(e, map[int32]int64{0: 8}, hw, "2 data + marker, 1 aborted + marker, 2 data + marker")
	c := newCell(e, m)
	c.handle(runtime.Topic(in).Group(g).Commit(m.of(e, "tx")), func(*runtime.Delivery) error { return nil })
	e.start(c.app)
	e.c.WaitCommitted(e, g, in, hw)
	e.stop(c.app)
	require.Equal(e, []string{"c1@1", "c2@1", "c3@1", "c4@1"}, c.calls.tagged())
	c.requireOutputs("c1", "c2", "c3", "c4")
}
