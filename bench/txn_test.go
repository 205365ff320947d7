package bench

import (
	"testing"
	"time"

	"github.com/tidemark-io/tidemark/runtime"
)

// BenchmarkTransactional consumes the e2e input (1,000,000 records on 8 partitions) with a no-op
// handler in the Tracked mode and in the Transactional mode (runtime.Transactional, the default
// 100 ms windows, each window's offsets committed in its transaction), one lane each, interleaved
// rounds times, and reports the medians and their ratio (DESIGN §6; goal ≥ 0.5). Each run is timed
// from New until the group's committed offsets (read_committed, stable) reach the end of the input.
func BenchmarkTransactional(b *testing.B) {
	hw := produce(b, e2eInput)
	n := float64(total(hw))
	rate := func(d time.Duration) float64 { return n / d.Seconds() }
	var tracked, txn []float64
	for range b.N {
		for r := range rounds {
			tracked = append(tracked, rate(runApp(b, app{topic: e2eInput.topic, group: newGroup("txn-tracked"), mode: runtime.Tracked, handler: noop}, hw)))
			g := newGroup("txn")
			txn = append(txn, rate(runApp(b, app{topic: e2eInput.topic, group: g, mode: runtime.Transactional("bench-" + g), handler: noop}, hw)))
			b.Logf("round %d: tracked %.0f, transactional %.0f records/s", r+1, tracked[len(tracked)-1], txn[len(txn)-1])
		}
	}
	mt, mx := median(tracked), median(txn)
	b.ReportMetric(mt, "tracked-rec/s")
	b.ReportMetric(mx, "txn-rec/s")
	b.ReportMetric(mx/mt, "txn/tracked")
}
