// Package cputime reads the CPU time the running process has used, for the benchmarks that
// report CPU per record (bench's BenchmarkEndToEnd, runtime's BenchmarkDispatch; see
// docs/performance.md). It is not part of Tidemark's API.
package cputime
