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

	_, live := c.track("recent", 1, false, func() {})
	require.False(t, live, "a recent cancellation still holds")
	ctx, cancel := context.WithCancel(context.Background())
	release, live := c.track("new-running", 1, false, cancel)
	require.True(t, live)
	defer release()
	c.cancel("new-running", now)
	require.Error(t, ctx.Err(), "its running activity is cancelled")
}

// TestAGivenUpActivityStopsOnlyItsOwnAttempt: a key
// <execution_id>.<activity_id> (request_cancel_activity) cancels the
// attempt of that activity, not the execution's others, and an attempt
// of it delivered later is not run; a cleanup activity the workflow runs
// after cancellation keeps going.
func TestAGivenUpActivityStopsOnlyItsOwnAttempt(t *testing.T) {
	c := newCancellations()
	now := time.Now()
	given, cancelGiven := context.WithCancel(context.Background())
	defer cancelGiven()
	kept, cancelKept := context.WithCancel(context.Background())
	defer cancelKept()
	release1, live := c.track("exec", 1, false, cancelGiven)
	require.True(t, live)
	defer release1()
	release2, live := c.track("exec", 2, false, cancelKept)
	require.True(t, live)
	defer release2()

	c.cancel(activityKey("exec", 1), now)
	require.Error(t, given.Err(), "the given-up activity's attempt is cancelled")
	require.NoError(t, kept.Err(), "the execution's other activity runs on")
	_, live = c.track("exec", 1, false, func() {})
	require.False(t, live, "a later attempt of the given-up activity is not run")
	release3, live := c.track("exec", 3, false, func() {})
	require.True(t, live, "a new activity of the execution (a compensation) runs")
	release3()
}

// TestACancelRequestStopsOnlyEagerAttempts: the key that says an
// execution was asked to cancel cancels its eager attempts (which hold
// the workflow task its code would learn of it in) and no other, and
// stops later eager attempts only.
func TestACancelRequestStopsOnlyEagerAttempts(t *testing.T) {
	c := newCancellations()
	eager, cancelEager := context.WithCancel(context.Background())
	defer cancelEager()
	other, cancelOther := context.WithCancel(context.Background())
	defer cancelOther()
	r1, _ := c.track("exec", 1, true, cancelEager)
	defer r1()
	r2, _ := c.track("exec", 2, false, cancelOther)
	defer r2()
	c.cancel("exec."+cancelRequestedSuffix, time.Now())
	require.Error(t, eager.Err())
	require.NoError(t, other.Err())
	_, live := c.track("exec", 3, true, func() {})
	require.False(t, live, "no eager attempt starts after the request")
	release, live := c.track("exec", 3, false, func() {})
	require.True(t, live, "a dispatched attempt (a compensation) runs")
	release()
}
