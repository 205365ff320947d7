package runtime

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// A retry copy's delay (Transactional) that arrives after dispatching stopped (its produce
// returned after Shutdown cut the last window's barrier), or for a partition revoked meanwhile,
// arms no timer and pauses nothing: stop has already stopped every timer, and one armed after it
// would pause and resume the partition, and report both to the Observer, after the App stopped.
// (The dispatcher's delay is the same in every mode; Transactional needs a group newBare has not.)
func TestADelayAfterStopOrRevokeArmsNoTimer(t *testing.T) {
	for _, tc := range []struct {
		name string
		end  func(c *consumer, ps *partState)
	}{
		{"stopped", func(c *consumer, _ *partState) { c.d.stop() }},
		{"revoked", func(c *consumer, _ *partState) { c.d.detach(map[string][]int32{"t": {0}}) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newBare(t, Tracked, HandlerFunc(func(context.Context, *Delivery) error { return nil }))
			t.Cleanup(func() {
				c.d.stop()
				c.cl.Close()
			})
			ps := c.d.parts[tp{"t", 0}]
			tc.end(c, ps)
			c.d.delay(tp{"t", 0}, time.Now().Add(time.Hour))
			c.d.mu.Lock()
			defer c.d.mu.Unlock()
			require.Empty(t, c.d.timers)
			require.False(t, ps.paused)
			require.True(t, ps.delayed.IsZero())
		})
	}
}
