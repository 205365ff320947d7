// Package txn holds the window of Tidemark's Transactional mode: the token that every record
// polled in one transaction carries (DESIGN §3.4).
//
// # Windows
//
// A Window is a global barrier: the poll loop adds every record it polls, seals the window when its
// CommitInterval has passed, and waits until every record is done before it ends the transaction.
// Aborting a window cancels its context, so its handlers learn at once that nothing they do will
// count.
//
// # Late producers
//
// Records produced into a window go through Window.Produce, which refuses once the window is
// closed: a handler still running when its window aborted can never write into the next
// transaction.
package txn
