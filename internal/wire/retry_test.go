package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

func TestRetryArithmetic(t *testing.T) {
	t.Parallel()
	d := wire.DefaultRetryPolicy()
	require.Equal(t, time.Second, d.Delay(1))
	require.Equal(t, 2*time.Second, d.Delay(2))
	require.Equal(t, 4*time.Second, d.Delay(3))
	require.Equal(t, 256*time.Second, d.Delay(9))
	require.Equal(t, 300*time.Second, d.Delay(10), "capped")
	require.Equal(t, 300*time.Second, d.Delay(60), "capped, no overflow")
	require.True(t, d.Retries(1, "x", false))
	require.True(t, d.Retries(2, "x", false))
	require.False(t, d.Retries(3, "x", false), "3 attempts, counting the first")
	require.False(t, d.Retries(1, "x", true), "non-retryable")

	p := wire.RetryPolicy{MaximumAttempts: 3, InitialIntervalMS: 2000, BackoffCoefficient: 2, NonRetryableErrorTypes: []string{"Declined"}}
	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, []time.Duration{p.Delay(1), p.Delay(2)})
	require.False(t, p.Retries(1, "Declined", false))
	unlimited := wire.RetryPolicy{}
	require.True(t, unlimited.Retries(1000, "x", false))
	require.Equal(t, time.Second, unlimited.Delay(1), "defaults fill zero fields")
	require.Equal(t, wire.DefaultStartToClose, wire.ActivityOptions{}.StartToClose())
}
