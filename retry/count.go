package retry

import "github.com/twmb/franz-go/pkg/kgo"

// CountHeader is the header key of the retry count of a retry copy: ASCII decimal, the deliveries
// the record had when the copy was made ("1" on the first copy of a record that failed once; DESIGN
// §3.3, docs/design.md "Departures"). The original record has none.
const CountHeader = "x-tidemark-retry-count"

// MaxCount caps the retry count Count reads (math.MaxInt32), so that an attempt number computed
// from it (count + 1, plus retries) cannot overflow.
const MaxCount = 1<<31 - 1

// Count returns the retry count carried by r's CountHeader: its value read as ASCII decimal digits
// only (no sign, no space), capped at MaxCount however many digits it has; 0 when the header is
// missing, empty or holds anything but digits (a negative value among them). When the header
// appears more than once the last one counts.
func Count(r *kgo.Record) int {
	n := 0
	for _, h := range r.Headers {
		if h.Key == CountHeader {
			n = parseCount(h.Value)
		}
	}
	return n
}

// parseCount reads v as ASCII decimal digits, capped at MaxCount; 0 if v is empty or holds anything
// else.
func parseCount(v []byte) int {
	n := 0
	for _, b := range v {
		if b < '0' || b > '9' {
			return 0
		}
		if d := int(b - '0'); n <= (MaxCount-d)/10 { // checked before it grows: int may be 32 bits
			n = n*10 + d
		} else {
			n = MaxCount
		}
	}
	return n
}
