// Package retry holds Tidemark's retry policy: how long to wait before a failed record is handled
// again, and how many deliveries a record has had.
//
// # Backoff
//
// A [Backoff] maps an attempt number (1 for the first failure) and the handler's error to a wait.
// [Default] is 100 ms doubling per attempt up to 30 s (DESIGN §3.3); in-place retries in the Tracked
// mode and, later, retry copies use the same policy.
//
// # Retry count
//
// A retry copy carries the header [CountHeader] (ASCII decimal): the deliveries the record had
// when the copy was made, so its first delivery is attempt count + 1. The original record has
// none. A missing, empty or malformed header (anything but ASCII digits) reads as 0, a larger count
// than [MaxCount] as MaxCount ([Count]).
//
// # Copies
//
// [Copy] makes a retry copy: key, value and user headers kept (each once), the count, the origin
// headers naming the first original, the group that made it and its not-before time (unix ms).
package retry
