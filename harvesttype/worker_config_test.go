package harvesttype

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// The tests of this file may import the machinery: they are not part of
// the package, whose own imports the layering test checks.

// TestTheDefaultTaskQueueIsTheDeployments: the default task queue is a
// persisted name, written here because this package may not import wire.
func TestTheDefaultTaskQueueIsTheDeployments(t *testing.T) {
	t.Parallel()
	require.Equal(t, wire.DefaultTaskQueue, DefaultTaskQueue)
}

// TestTheReplaySampleBoundIsTheDeployments: ingest answers a replay
// check's request for at most as many executions as a worker may ask.
func TestTheReplaySampleBoundIsTheDeployments(t *testing.T) {
	t.Parallel()
	require.Equal(t, wire.MaxReplaySample, MaxReplayCheckSample)
}

func TestWithDefaultsFillsTheZeroValues(t *testing.T) {
	t.Parallel()
	got := WorkerConfig{}.WithDefaults()
	require.Equal(t, DefaultTaskQueue, got.TaskQueue)
	require.Equal(t, DefaultActivityConcurrency, got.ActivityConcurrency)
	require.Equal(t, DefaultWorkflowTaskConcurrency, got.WorkflowTaskConcurrency)
	require.Equal(t, DefaultTaskAckWait, got.TaskAckWait)
	require.Equal(t, DefaultShutdownGrace, got.ShutdownGrace)
	require.Equal(t, DefaultWorkflowCacheSize, got.WorkflowCacheSize)
	require.Equal(t, ReplayCheck{Timeout: DefaultReplayCheckTimeout}, got.ReplayCheck)
	require.NotNil(t, got.Logger)

	log := slog.New(slog.DiscardHandler)
	set := WorkerConfig{TaskQueue: "gpu", ActivityConcurrency: 1, TaskAckWait: 2 * time.Second, WorkflowCacheSize: -1, Logger: log}.WithDefaults()
	require.Equal(t, "gpu", set.TaskQueue)
	require.Equal(t, 1, set.ActivityConcurrency)
	require.Equal(t, 2*time.Second, set.TaskAckWait)
	require.Equal(t, -1, set.WorkflowCacheSize)
	require.Same(t, log, set.Logger)
}

func TestValidateNamesTheBadField(t *testing.T) {
	t.Parallel()
	// Validate reads no more than whether there is a connection.
	nc := &nats.Conn{}
	require.NoError(t, WorkerConfig{NATS: nc}.Validate())
	require.NoError(t, WorkerConfig{NATS: nc, ReplayCheck: ReplayCheck{Sample: MaxReplayCheckSample}}.Validate())
	for _, tc := range []struct {
		cfg  WorkerConfig
		want string
	}{
		{WorkerConfig{}, "worker config: NATS is required: give a connection, or set HARVEST_NATS_URL to the deployment's NATS URL"},
		{WorkerConfig{NATS: nc, ActivityConcurrency: -1}, "worker config: ActivityConcurrency -1: want at least 1"},
		{WorkerConfig{NATS: nc, WorkflowTaskConcurrency: -2}, "worker config: WorkflowTaskConcurrency -2: want at least 1"},
		{WorkerConfig{NATS: nc, TaskAckWait: time.Millisecond}, "worker config: TaskAckWait 1ms: want at least 1s"},
		{WorkerConfig{NATS: nc, ShutdownGrace: -time.Second}, "worker config: ShutdownGrace -1s: want a positive duration"},
		{WorkerConfig{NATS: nc, TaskQueue: "a.b"}, `worker config: TaskQueue: invalid name "a.b": only letters, digits, '_' and '-'`},
		{WorkerConfig{NATS: nc, ReplayCheck: ReplayCheck{Sample: -1}}, "worker config: ReplayCheck.Sample -1: want 0 (off) to 1000"},
		{WorkerConfig{NATS: nc, ReplayCheck: ReplayCheck{Sample: 1001}}, "worker config: ReplayCheck.Sample 1001: want 0 (off) to 1000"},
		{WorkerConfig{NATS: nc, ReplayCheck: ReplayCheck{Sample: 5, Timeout: -time.Second}}, "worker config: ReplayCheck.Timeout -1s: want a positive duration"},
		{WorkerConfig{NATS: nc, BuildID: "v1 beta"}, `worker config: BuildID: invalid build id "v1 beta": only letters, digits and '.', '_', '-', '+', '~'`},
	} {
		require.EqualError(t, tc.cfg.Validate(), tc.want)
	}
}
