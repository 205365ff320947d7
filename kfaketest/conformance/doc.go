// Package conformance holds Tidemark's exported conformance scenarios and its chaos runs: the
// contract of DESIGN §3 as tests that run against a Target, the in-process kfake cluster or a
// real one.
//
// # Scenarios
//
// Run runs every scenario as a subtest of the caller's test: at least one per cell of the outcome
// × commit mode table (§3.2), and one or more per rule of the tracker (§3.1), retries and dead
// letters (§3.3), exactly-once (§3.4), batches (§3.5), lanes and ordering (§3.6), rebalances and
// shutdown (§3.7) and transaction markers (§3.7a). Each asserts exact values: handler calls and
// their attempts, committed offsets, header values, outputs under read_committed.
//
//	func TestConformance(t *testing.T) { conformance.Run(t, conformance.FromEnv()) }
//
// Every scenario gets its own cluster (kfaketest.New) or, on a real cluster, its own
// kfaketest.Connect with a per-run prefix on every topic, group and transactional id, so runs
// sharing a cluster never meet. Scenarios that need what only kfake offers (the commit log,
// injected faults) are skipped on a real cluster with a line on stderr naming each; parts of a
// scenario that need them are skipped the same way while the rest runs.
//
// # Chaos
//
// Chaos runs seeded randomized runs on the crash runner: 1–8 partitions, 100–5,000 records,
// handler outcomes (ack, drop, retry, retry after a delay, panic under OnPanic(PanicRetry)),
// SIGKILLs and graceful stops at random moments, members joining and leaving, in the Tracked and
// the Transactional mode. After every run it checks the invariants: in Tracked, every record was
// handled (none lost), no commit ever passed a record whose handler had not returned when the
// commit arrived, and committed offsets never go back (neither a member's own requests within a
// generation nor what the group holds); in Transactional, the read_committed output holds exactly
// one output per input. A failing run names its seed; the
// same seed replays the same configuration and schedule (`make chaos SEED=n`).
//
// The crash runner re-executes the test binary: Run and Chaos must be called from a test that
// does nothing else before them (see kfaketest.Child).
package conformance
