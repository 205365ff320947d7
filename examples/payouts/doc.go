// Command payouts is Tidemark's first demo: the payouts service of the reference design (DESIGN
// §4), three subscriptions in one App, run against an embedded kfake cluster on the bundled input
// until every record has settled, then a summary of what each record came to.
//
//	go run ./examples/payouts                     # embedded cluster, bundled input
//	go run ./examples/payouts -brokers host:9092 -seed  # a real cluster; -seed produces the input
//
// # What it shows
//
//   - pay_out (Topic("payouts"), Tracked, JSONReply + Reply("payouts.done")) pays each payout
//     through a bank that fails some calls. A failed call asks for a retry; with MaxAttempts(5) it
//     becomes a retry copy on the payouts topic, handled again after a short Backoff, so the
//     payout is paid in the end and gets exactly one reply. A payout whose five attempts all fail
//     is spent and goes to payouts.dlq (DeadLetter), as do zero amounts (Drop) and lines that are
//     not a payout (decode failures): a declared dead-letter topic receives every record that is
//     settled without being handled successfully (DESIGN §3.2–3.3).
//   - count_view (Topic("page-views").Group("analytics"), Auto) counts page views in a store that
//     fails for some views. Auto has no retry: each failed view is refused (ErrRetryUnsupported)
//     and lost, and the summary counts them. That is the price of the cheap mode.
//   - reconcile (HandleBatch of up to 500, Topic("statements").Group("reconciliation"), Tracked)
//     posts bank statement lines to a ledger, dropping empty lines one element at a time
//     (DESIGN §3.5).
//
// The runtime.Observer counts every Settled event, and the run ends once every group's committed
// offsets equal the high watermarks of its topic (lag 0, retry copies included). Failures are a
// seeded function of each record's id, so every run prints the same numbers; only the times
// change.
//
// # Files
//
// main.go holds the flags; run.go the run (cluster, input, App, wait, shutdown); service.go the
// handlers, the bank, the counters store and the ledger; observe.go the Observer; summary.go the
// summary; offsets.go the committed offsets and high watermarks; input.go the bundled input, which
// internal/gen writes (go generate) and payouts_test.go checks against the summary, number by
// number.
package main

//go:generate go run ./internal/gen -out testdata
