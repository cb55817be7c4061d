package bench_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/bench"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// startLocal runs a stack in this process on a fresh database and NATS
// server, as the devstack tests do.
func startLocal(t *testing.T) *bench.Local {
	t.Helper()
	l, err := bench.StartLocal(natstest.Context(t), devstack.Config{
		NATSURL:     natstest.RunServer(t, natstest.Options{}).ClientURL(),
		DatabaseURL: pgtest.NewDatabase(t),
		Addr:        "127.0.0.1:0",
		StateDir:    t.TempDir(),
		// Shared cores under -race: wait longer than a deployment would
		// before answering 202.
		Ingest: ingest.Config{OutcomeWait: 30 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, l.Stop(ctx))
	})
	return l
}

// namedFields are the JSON names issue 7 asks for.
var namedFields = []string{
	"workload", "n", "submissions", "submits_per_s", "completions_per_s",
	"start_p50_ms", "start_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
	"distinct_executions", "activity_runs", "duplicates_detected", "errors",
	"cpu_s", "peak_rss_mb",
	"sql_statements_per_workflow", "transactions_per_workflow", "jetstream_messages_per_workflow",
}

func requireVerified(t *testing.T, res *bench.Result) {
	t.Helper()
	var table strings.Builder
	require.NoError(t, bench.WriteTable(&table, res))
	t.Logf("\n%s", table.String())
	for _, c := range res.Checks {
		require.True(t, c.OK, "check %s: want %d, got %d", c.Name, c.Want, c.Got)
	}
	require.True(t, res.OK)
	require.Zero(t, res.Errors, res.ErrorSamples)

	raw, err := json.Marshal(res)
	require.NoError(t, err)
	var fields map[string]any
	require.NoError(t, json.Unmarshal(raw, &fields))
	for _, name := range namedFields {
		require.Contains(t, fields, name)
	}
	require.Equal(t, string(res.Workload), fields["workload"])
}

func TestWorkloads(t *testing.T) {
	l := startLocal(t)
	ctx := natstest.Context(t)
	const n = 60

	t.Run("W1", func(t *testing.T) {
		var last bench.Progress
		res, err := bench.Run(ctx, bench.Config{Workload: bench.W1, N: n, Concurrency: 4, Local: l,
			Progress: func(p bench.Progress) { last = p }})
		require.NoError(t, err)
		requireVerified(t, res)
		require.Equal(t, n, res.Submissions)
		require.Equal(t, n, res.DistinctExecutions)
		require.EqualValues(t, n, res.ActivityRuns)
		require.Equal(t, "worker", res.ActivityRunsSource)
		require.Zero(t, res.DuplicatesDetected)
		require.Equal(t, bench.Progress{Workload: bench.W1, Submitted: n, Submissions: n, Completed: n, Expected: n}, last)
		require.Positive(t, res.SubmitsPerS)
		require.Positive(t, res.CompletionsPerS)
		require.Positive(t, res.E2EP50Ms)
		require.GreaterOrEqual(t, res.E2EP99Ms, res.E2EP50Ms)
		require.GreaterOrEqual(t, res.StartP99Ms, res.StartP50Ms)
		// In process, the costs are measured.
		require.NotNil(t, res.CPUS)
		require.NotNil(t, res.PeakRSSMB)
		require.NotNil(t, res.SQLStatementsPerWorkflow)
		require.Positive(t, *res.SQLStatementsPerWorkflow)
		require.Positive(t, *res.TransactionsPerWorkflow)
		require.Positive(t, *res.JetStreamMessagesPerWorkflow)
		require.Contains(t, res.JetStreamMessagesPerStream, "HARVEST_CMD")
		require.Contains(t, res.JetStreamMessagesPerStream, "HARVEST_TASK")
	})

	t.Run("W2", func(t *testing.T) {
		res, err := bench.Run(ctx, bench.Config{Workload: bench.W2, N: n, Concurrency: 4, Local: l})
		require.NoError(t, err)
		requireVerified(t, res)
		extras := 18 // 30% of 60
		require.Equal(t, n+extras, res.Submissions)
		require.Equal(t, n, res.DistinctExecutions)
		require.EqualValues(t, n, res.ActivityRuns)
		require.Equal(t, extras, res.DuplicatesDetected)
	})

	t.Run("W3", func(t *testing.T) {
		const executions = 20
		res, err := bench.Run(ctx, bench.Config{Workload: bench.W3, N: executions, Concurrency: 4, Local: l})
		require.NoError(t, err)
		requireVerified(t, res)
		require.Equal(t, executions*(1+10+3), res.Submissions)
		require.Equal(t, executions, res.DistinctExecutions)
		require.Equal(t, executions*3, res.DuplicatesDetected)
		require.NotNil(t, res.SignalP50Ms)
	})

	t.Run("W1 open loop", func(t *testing.T) {
		// 40 starts at 40 a second: about a second of sending, on the
		// schedule whatever the answers do.
		res, err := bench.Run(ctx, bench.Config{Workload: bench.W1, N: 40, Rate: 40, Local: l})
		require.NoError(t, err)
		requireVerified(t, res)
		require.Equal(t, 40, res.DistinctExecutions)
		require.NotNil(t, res.Rate)
		require.InDelta(t, 40.0, *res.Rate, 0)
		require.NotNil(t, res.SendLagP99Ms)
		require.GreaterOrEqual(t, res.MaxInFlightSeen, 1)
		// The sends follow the schedule: 39 intervals of 25 ms at least.
		require.GreaterOrEqual(t, res.DurationS, 0.975)
		require.GreaterOrEqual(t, res.StartP99Ms, *res.SendLagP99Ms, "a start's latency runs from when it was due")
	})

	t.Run("W1 rate search", func(t *testing.T) {
		// A bound every rate holds: the search doubles up to its maximum.
		held, err := bench.FindRate(ctx, bench.Config{Workload: bench.W1, Local: l},
			bench.RateSearch{P99: time.Hour, Step: time.Second, From: 10, Max: 20}, nil)
		require.NoError(t, err)
		require.Len(t, held.Steps, 2)
		require.InDelta(t, 20.0, held.SustainedRate, 0)
		for _, st := range held.Steps {
			require.True(t, st.Held, st.Why)
			requireVerified(t, st.Result)
		}
		// A bound no rate holds: it halves from the first rate, then
		// refines nothing, and finds none.
		var seen []float64
		none, err := bench.FindRate(ctx, bench.Config{Workload: bench.W1, Local: l},
			bench.RateSearch{P99: time.Nanosecond, Step: time.Second, From: 8, Max: 8}, func(st bench.RateStep) { seen = append(seen, st.Rate) })
		require.NoError(t, err)
		require.Equal(t, []float64{8, 4, 2, 1}, seen)
		require.Zero(t, none.SustainedRate)
		var table strings.Builder
		require.NoError(t, bench.WriteRateTable(&table, none))
		require.Contains(t, table.String(), "sustained_rate")
		require.Contains(t, table.String(), "missed: e2e p99")
	})

	t.Run("W2 against --addr", func(t *testing.T) {
		// Without Local the bench sees only the HTTP API: completions from
		// the list endpoint, activity runs from the histories, no costs.
		res, err := bench.Run(ctx, bench.Config{Workload: bench.W2, N: 30, Concurrency: 4, BaseURL: l.URL()})
		require.NoError(t, err)
		requireVerified(t, res)
		require.Equal(t, "history", res.ActivityRunsSource)
		require.EqualValues(t, 30, res.ActivityRuns)
		require.Nil(t, res.CPUS)
		require.Nil(t, res.SQLStatementsPerWorkflow)
		require.Nil(t, res.JetStreamMessagesPerWorkflow)
	})
}

func TestConfigErrors(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, cfg := range []bench.Config{
		{Workload: "W4", BaseURL: "http://127.0.0.1:1"},
		{Workload: bench.W1},
		{Workload: bench.W1, N: -1, BaseURL: "http://127.0.0.1:1"},
		{Workload: bench.W1, Concurrency: -1, BaseURL: "http://127.0.0.1:1"},
		{Workload: bench.W1, Rate: -1, BaseURL: "http://127.0.0.1:1"},
		{Workload: bench.W3, Rate: 10, BaseURL: "http://127.0.0.1:1"},
		{Workload: bench.W1, Rate: 10, MaxInFlight: -1, BaseURL: "http://127.0.0.1:1"},
	} {
		_, err := bench.Run(ctx, cfg)
		require.Error(t, err, "%+v", cfg)
	}
}
