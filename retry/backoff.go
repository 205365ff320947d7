package retry

import "time"

// A Backoff returns how long to wait before the next delivery of a record whose handler failed.
// attempt is the number of the delivery that failed (1 for the first); err is what the handler
// returned. A negative result is treated as 0.
type Backoff func(attempt int, err error) time.Duration

// Exponential returns a Backoff that waits base after the first failure and doubles per attempt, never
// more than max. base and max are durations (base > 0, max >= base; other values are clamped).
func Exponential(base, max time.Duration) Backoff {
	if base <= 0 {
		base = time.Millisecond
	}
	if max < base {
		max = base
	}
	return func(attempt int, _ error) time.Duration {
		if attempt < 1 {
			attempt = 1
		}
		d := base
		for i := 1; i < attempt; i++ {
			d *= 2
			if d >= max || d <= 0 {
				return max
			}
		}
		return d
	}
}

// Default is the policy of DESIGN §3.3: 100 ms after the first failure, doubling to at most 30 s.
func Default() Backoff { return Exponential(100*time.Millisecond, 30*time.Second) }
