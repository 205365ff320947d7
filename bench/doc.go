// Package bench holds Tidemark's end-to-end benchmarks (DESIGN §6): a handler that only counts
// (one atomic add per record) in the Auto and Tracked modes against a raw franz-go poll loop, I/O-bound handlers against the ideal
// throughput of their lanes, the Transactional mode against Tracked, and the memory of a consumer
// process while a large backlog waits. They run against one in-process kfake cluster, which
// every benchmark of a run shares, so each input is produced once per run.
//
// The benchmarks live in the package's test files and run only with -bench; `make bench` runs
// them together with the tracker's micro-benchmarks and prints one table with
// ./bench/cmd/benchtable. docs/performance.md holds a full run and how to reproduce it.
package bench
