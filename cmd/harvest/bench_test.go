package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
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

// runCLI runs `harvest args...` and returns its stdout and stderr.
func runCLI(t *testing.T, args ...string) (string, string, error) {
	t.Helper()
	var stdout, stderr bytes.Buffer
	root := newRoot()
	root.SetOut(&stdout)
	root.SetErr(&stderr)
	root.SetArgs(args)
	err := root.Execute()
	return stdout.String(), stderr.String(), err
}

// requireBenchJSON checks that out is exactly one JSON object with every
// field issue 7 names, and that its checks passed.
func requireBenchJSON(t *testing.T, out string, workload string, n int) map[string]any {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	var fields map[string]any
	require.NoError(t, dec.Decode(&fields), "stdout: %s", out)
	require.False(t, dec.More(), "more than one JSON value on stdout: %s", out)
	for _, name := range []string{
		"workload", "n", "submissions", "submits_per_s", "completions_per_s",
		"start_p50_ms", "start_p99_ms", "e2e_p50_ms", "e2e_p99_ms",
		"distinct_executions", "activity_runs", "duplicates_detected", "errors",
		"cpu_s", "peak_rss_mb",
		"sql_statements_per_workflow", "transactions_per_workflow", "jetstream_messages_per_workflow",
	} {
		require.Contains(t, fields, name)
	}
	require.Equal(t, workload, fields["workload"])
	require.EqualValues(t, n, fields["n"])
	require.EqualValues(t, n, fields["distinct_executions"])
	require.EqualValues(t, 0, fields["errors"])
	require.Equal(t, true, fields["ok"])
	return fields
}

func TestBenchAgainstAddr(t *testing.T) {
	t.Parallel()
	l, err := bench.StartLocal(natstest.Context(t), devstack.Config{
		NATSURL:     natstest.RunServer(t, natstest.Options{}).ClientURL(),
		DatabaseURL: pgtest.NewDatabase(t),
		Addr:        "127.0.0.1:0",
		StateDir:    t.TempDir(),
		Ingest:      ingest.Config{OutcomeWait: 30 * time.Second},
	})
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, l.Stop(ctx))
	})

	out, _, err := runCLI(t, "bench", "--workload", "W1", "--n", "20", "--concurrency", "4", "--addr", l.URL(), "--json")
	require.NoError(t, err)
	fields := requireBenchJSON(t, out, "W1", 20)
	require.EqualValues(t, 20, fields["activity_runs"])
	require.Nil(t, fields["cpu_s"], "not measured against --addr")
	require.Nil(t, fields["sql_statements_per_workflow"])

	table, _, err := runCLI(t, "bench", "--workload", "W3", "--n", "5", "--concurrency", "4", "--addr", l.URL())
	require.NoError(t, err)
	require.Contains(t, table, "harvest bench W3")
	require.Contains(t, table, "executions_with_exactly_their_10_items")
	require.Contains(t, table, "not measured against --addr")
	require.NotContains(t, table, "FAILED")
}

// TestBenchInProcess runs the in-process stack the CLI starts itself, on
// the test's NATS and PostgreSQL (named by the environment, as for
// `harvest dev`).
func TestBenchInProcess(t *testing.T) {
	t.Setenv("HARVEST_NATS_URL", natstest.RunServer(t, natstest.Options{}).ClientURL())
	t.Setenv("HARVEST_DATABASE_URL", pgtest.NewDatabase(t))
	t.Setenv("HARVEST_OUTCOME_WAIT", "30s")
	t.Setenv("HARVEST_CONFIG", "")

	dir := t.TempDir()
	cpu, heap := filepath.Join(dir, "cpu.pb.gz"), filepath.Join(dir, "heap.pb.gz")
	out, stderr, err := runCLI(t, "bench", "--workload", "W2", "--n", "20", "--concurrency", "4", "--json",
		"--cpuprofile", cpu, "--memprofile", heap, "--extra-workers", "2")
	require.NoError(t, err, stderr)
	fields := requireBenchJSON(t, out, "W2", 20)
	for _, path := range []string{cpu, heap} {
		raw, err := os.ReadFile(path)
		require.NoError(t, err)
		require.Greater(t, len(raw), 2, path)
		require.Equal(t, []byte{0x1f, 0x8b}, raw[:2], "%s: a profile is gzipped protobuf", path)
	}
	require.EqualValues(t, 20, fields["activity_runs"])
	require.EqualValues(t, 6, fields["duplicates_detected"])
	require.NotNil(t, fields["cpu_s"])
	require.NotNil(t, fields["sql_statements_per_workflow"])
	require.NotNil(t, fields["transactions_per_workflow"])
	require.NotNil(t, fields["jetstream_messages_per_workflow"])
}

func TestBenchFlags(t *testing.T) {
	t.Parallel()
	_, _, err := runCLI(t, "bench", "--addr", "http://127.0.0.1:1")
	require.ErrorContains(t, err, "workload")
	_, _, err = runCLI(t, "bench", "--workload", "W9", "--addr", "http://127.0.0.1:1")
	require.ErrorContains(t, err, "W9")
	_, _, err = runCLI(t, "bench", "--workload", "W1", "--addr", "http://127.0.0.1:1", "--extra-workers", "2")
	require.ErrorContains(t, err, "--extra-workers measure a stack in this process")
	for _, bad := range []string{"fast", "0", "-5", "Inf"} {
		_, _, err = runCLI(t, "bench", "--workload", "W1", "--addr", "http://127.0.0.1:1", "--rate", bad)
		require.ErrorContains(t, err, "want a positive number of starts a second, or auto", bad)
	}
	_, _, err = runCLI(t, "bench", "--workload", "W3", "--addr", "http://127.0.0.1:1", "--rate", "auto")
	require.ErrorContains(t, err, "--rate sends W1's or W2's starts open-loop")
}

// TestBenchLeavesNothingBehind: the in-process stack of harvest bench,
// with its private PostgreSQL and embedded NATS, leaves nothing in the
// temp dir once the bench is done, PostgreSQL's data included.
func TestBenchLeavesNothingBehind(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	t.Setenv("HARVEST_NATS_URL", "")
	t.Setenv("HARVEST_DATABASE_URL", "")
	t.Setenv("HARVEST_CONFIG", "")
	t.Setenv("HARVEST_OUTCOME_WAIT", "30s")

	out, stderr, err := runCLI(t, "bench", "--workload", "W1", "--n", "5", "--concurrency", "2", "--json")
	require.NoError(t, err, stderr)
	requireBenchJSON(t, out, "W1", 5)
	left, err := os.ReadDir(tmp)
	require.NoError(t, err)
	require.Empty(t, left, "harvest bench left %v in the temp dir", left)
}
