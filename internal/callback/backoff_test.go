package callback

import (
	"math"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestRetryDelay(t *testing.T) {
	tests := []struct {
		attempt int
		nominal time.Duration
	}{
		{math.MinInt, 0},
		{-1, 0},
		{0, 0},
		{1, 0},
		{2, time.Second},
		{3, 2 * time.Second},
		{4, 4 * time.Second},
		{5, 8 * time.Second},
		{10, 256 * time.Second},
		{11, 512 * time.Second},
		{12, 10 * time.Minute},
		{31, 10 * time.Minute},
		{32, 10 * time.Minute},
		{1000, 10 * time.Minute},
		{math.MaxInt, 10 * time.Minute},
	}
	for _, tt := range tests {
		t.Run(strconv.Itoa(tt.attempt), func(t *testing.T) {
			lo := tt.nominal - tt.nominal/5
			jittered := false
			for range 500 {
				d := RetryDelay(tt.attempt)
				require.GreaterOrEqual(t, d, lo)
				require.LessOrEqual(t, d, tt.nominal)
				if d != tt.nominal {
					jittered = true
				}
			}
			if tt.nominal > 0 {
				require.True(t, jittered, "no jitter applied")
			}
		})
	}
}

func TestDefaultScheduleTotal(t *testing.T) {
	var total time.Duration
	for n := 2; n <= DefaultMaxAttempts; n++ {
		total += RetryDelay(n)
	}
	require.LessOrEqual(t, total, 511*time.Second)
	require.GreaterOrEqual(t, total, 511*time.Second*4/5)
}
