package retry

import (
	"strconv"

	"github.com/twmb/franz-go/pkg/kgo"
)

// CountHeader is the header key of the retry count of a retry copy: ASCII decimal, the deliveries
// the record had when the copy was made ("1" on the first copy of a record that failed once; DESIGN
// §3.3, docs/design.md "Departures"). The original record has none.
const CountHeader = "x-tidemark-retry-count"

// MaxCount caps the retry count Count reads (math.MaxInt32), so that an attempt number computed
// from it (count + 1, plus retries) cannot overflow.
const MaxCount = 1<<31 - 1

// Count returns the retry count carried by r's CountHeader: 0 when the header is missing, malformed
// or negative, MaxCount when it is larger. When the header appears more than once the last one
// counts.
func Count(r *kgo.Record) int {
	n := 0
	for _, h := range r.Headers {
		if h.Key != CountHeader {
			continue
		}
		v, err := strconv.Atoi(string(h.Value))
		if err != nil || v < 0 {
			n = 0
			continue
		}
		n = min(v, MaxCount)
	}
	return n
}
