package workerrt

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestAWorkerForgetsCancellationsTheBucketExpired: a long-lived worker
// does not keep every execution ever cancelled. Announcements older than
// the bucket's TTL, which the bucket has dropped, are forgotten as new
// ones come in; recent ones still stop their executions' activities.
func TestAWorkerForgetsCancellationsTheBucketExpired(t *testing.T) {
	c := newCancellations()
	c.ttl = time.Hour
	now := time.Now()
	for i := range 3 * sweepEvery {
		c.cancel(fmt.Sprintf("old-%d", i), now.Add(-2*time.Hour))
	}
	c.cancel("recent", now)
	for i := range sweepEvery {
		c.cancel(fmt.Sprintf("new-%d", i), now)
	}
	c.mu.Lock()
	held := len(c.cancelled)
	c.mu.Unlock()
	require.LessOrEqual(t, held, 2*sweepEvery+1, "the expired announcements are forgotten")

	_, live := c.track("recent", func() {})
	require.False(t, live, "a recent cancellation still holds")
	ctx, cancel := context.WithCancel(context.Background())
	release, live := c.track("new-running", cancel)
	require.True(t, live)
	defer release()
	c.cancel("new-running", now)
	require.Error(t, ctx.Err(), "its running activity is cancelled")
}
