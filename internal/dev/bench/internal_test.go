package bench

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestPercentile(t *testing.T) {
	t.Parallel()
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	require.Equal(t, 50*time.Millisecond, percentile(s, 50))
	require.Equal(t, 99*time.Millisecond, percentile(s, 99))
	require.Equal(t, 100*time.Millisecond, percentile(s, 100))
	require.Equal(t, time.Millisecond, percentile(s, 0))
	require.Equal(t, time.Duration(0), percentile(nil, 50))
	require.Equal(t, 7*time.Millisecond, percentile([]time.Duration{7 * time.Millisecond}, 99))
	require.Equal(t, 100*time.Millisecond, s[0], "the samples are not reordered")
}

func TestPlanStarts(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{Workload: W2, N: 100, Concurrency: 16, Seed: 1}}
	plan := r.planStarts()
	require.Len(t, plan, 130)
	seen := map[int][]int{}
	for pos, k := range plan {
		seen[k] = append(seen[k], pos)
	}
	require.Len(t, seen, 100)
	twice := 0
	for k, pos := range seen {
		require.LessOrEqual(t, len(pos), 2, "key %d", k)
		if len(pos) == 2 {
			twice++
			// The retry follows its original closely enough to race it.
			require.Less(t, pos[0], pos[1])
			require.LessOrEqual(t, pos[1]-pos[0], 2*16, "key %d", k)
		}
	}
	require.Equal(t, 30, twice)

	r.cfg.Workload = W1
	require.Len(t, r.planStarts(), 100)
}

func TestSignalOrder(t *testing.T) {
	t.Parallel()
	r := &runner{cfg: Config{Workload: W3, N: 5, Seed: 1, Signals: SignalsPerCollect}}
	for i := range 5 {
		order := r.signalOrder(i)
		require.Len(t, order, 13)
		count := map[int]int{}
		for _, j := range order {
			count[j]++
		}
		require.Len(t, count, 10)
		twice := 0
		for _, c := range count {
			if c == 2 {
				twice++
			}
		}
		require.Equal(t, 3, twice)
	}
}

func TestTxControl(t *testing.T) {
	t.Parallel()
	for _, sql := range []string{"begin", "BEGIN ISOLATION LEVEL SERIALIZABLE", "commit", " rollback", "savepoint sp_1", "release savepoint sp_1"} {
		require.True(t, txControl(sql), sql)
	}
	for _, sql := range []string{"SELECT 1", "insert into begins values (1)", "\n\tUPDATE executions SET status = $1", "WITH c AS (SELECT 1) SELECT * FROM c"} {
		require.False(t, txControl(sql), sql)
	}
}
