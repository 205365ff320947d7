// Command gen writes the payouts demo's bundled input, examples/payouts/testdata: payouts, page
// views and bank statement lines as gzipped JSON lines, the same bytes on every run.
//
//	go generate ./examples/payouts   # or: go run ./examples/payouts/internal/gen -out examples/payouts/testdata
//
// # What it writes
//
//   - payouts.jsonl.gz: 10,000 payouts, about 2% of them for zero cents, and a few malformed lines.
//   - page-views.jsonl.gz: 50,000 page views and a few malformed lines.
//   - statements.jsonl.gz: 10,000 statement lines (500 statements of 20 lines), about 3% of them
//     empty (no payout, no amount), and a few malformed lines.
//
// Malformed lines are added to the counts above, never in place of a record. Everything comes from
// one PCG generator with a fixed seed (math/rand/v2's PCG is specified, so its output does not
// change between Go releases); gen_test.go checks that the committed files hold what it makes.
package main
