package batch

// Cut splits queue into the batch a lane takes now, at most n elements (n < 1 counts as 1), and the
// rest, which stays queued. The batch shares queue's backing array, its capacity cut to its length:
// appending to it allocates, and never writes over the rest.
func Cut[T any](queue []T, n int) (take, rest []T) {
	k := min(max(n, 1), len(queue))
	return queue[:k:k], queue[k:]
}

// Align fits a batch handler's results to a batch of size elements. It returns one entry per
// element: results[i] where the handler gave one, and uncovered for every element past the end of a
// short result. short counts the uncovered elements; extra counts the entries past size, which are
// ignored. A negative size is taken as 0.
func Align(results []error, size int, uncovered error) (aligned []error, short, extra int) {
	size = max(size, 0)
	aligned = make([]error, size)
	n := copy(aligned, results)
	for i := n; i < size; i++ {
		aligned[i] = uncovered
	}
	return aligned, size - n, max(len(results)-size, 0)
}
