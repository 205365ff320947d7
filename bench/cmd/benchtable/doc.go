// Command benchtable reads the output of `go test -bench` for the tracker and bench packages
// and prints the table of DESIGN §6 in Markdown: the tracker against its mutex + sorted-slice
// baseline, end-to-end throughput against a raw franz-go poll loop, I/O-bound handlers against
// their ideal, Transactional against Tracked, and the consumer process's peak RSS per backlog,
// each with its goal and whether this run met it. `make bench` runs it.
//
// Usage:
//
//	benchtable FILE...
//
// With no file it reads standard input. It exits with status 1 if an input reports a failure
// (a FAIL line) or holds no benchmark result.
package main
