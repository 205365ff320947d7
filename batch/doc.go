// Package batch cuts batches for batch handlers and aligns their per-element results (DESIGN §3.5).
//
// # Formation
//
// A lane takes one ready record plus the records already ready behind it in the same unit of
// order, never more than n, never empty, and never waits for more: [Cut].
//
// # Results
//
// A batch handler returns one error per element. [Align] fits a result to the batch: a short
// result leaves the uncovered elements to be retried, a long one has its extra entries ignored.
package batch
