package scheduler

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestAPinnedExecutionTakesTheBuildOfItsFirstTask: a start of a workflow
// configured pinned, that names no versioning, is pinned; its first
// task goes to the subject every build shares, and the build that
// completes it is the one its later tasks go to. A start that says
// auto_upgrade is not pinned; one that names a build is pinned to it
// from the start.
func TestAPinnedExecutionTakesTheBuildOfItsFirstTask(t *testing.T) {
	m, err := NewMemory(MemoryConfig{PinnedWorkflows: map[string]bool{"order": true}})
	require.NoError(t, err)
	ctx := t.Context()
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	start := func(id, versioning, build string) *store.Execution {
		t.Helper()
		d, err := m.Apply(ctx, now, &wire.Command{CommandID: id, Kind: wire.KindStart, Start: &wire.StartCommand{
			WorkflowName: "order", WorkflowID: id, TaskQueue: "default", Versioning: versioning, PinnedBuild: build}})
		require.NoError(t, err)
		require.Len(t, d.WorkflowTasks, 1)
		e, _, ok := m.Execution(d.WorkflowTasks[0].ExecutionID)
		require.True(t, ok)
		return &e
	}

	e := start("o-1", "", "")
	require.Equal(t, wire.VersioningPinned, e.Versioning)
	require.Empty(t, e.PinnedBuild)
	require.Equal(t, broker.NameTaskSubject("default", wire.TaskWorkflow, "order"), workflowTaskSubject(e))
	_, err = m.Apply(ctx, now, &wire.Command{CommandID: "done-1", Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: e.ExecutionID, TaskID: 1, BuildID: "v1.0.0"}})
	require.NoError(t, err)
	got, _, _ := m.Execution(e.ExecutionID)
	require.Equal(t, "v1.0.0", got.PinnedBuild)
	require.Equal(t, broker.PinnedTaskSubject("default", "order", "v1.0.0"), workflowTaskSubject(&got))

	e = start("o-2", wire.VersioningAutoUpgrade, "")
	require.Equal(t, wire.VersioningAutoUpgrade, e.Versioning)
	_, err = m.Apply(ctx, now, &wire.Command{CommandID: "done-2", Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: e.ExecutionID, TaskID: 1, BuildID: "v1.0.0"}})
	require.NoError(t, err)
	got, _, _ = m.Execution(e.ExecutionID)
	require.Empty(t, got.PinnedBuild, "an auto-upgrading execution is not pinned")

	e = start("o-3", wire.VersioningPinned, "v2.0.0")
	require.Equal(t, "v2.0.0", e.PinnedBuild)
	require.Equal(t, broker.PinnedTaskSubject("default", "order", "v2.0.0"), workflowTaskSubject(e))
}

// TestAStartsVersioningIsChecked: the scheduler applies only the
// versionings it knows, and a pinned build that is a build id.
func TestAStartsVersioningIsChecked(t *testing.T) {
	for _, c := range []struct {
		versioning, build string
		ok                bool
	}{
		{"", "", true}, {wire.VersioningAutoUpgrade, "", true}, {wire.VersioningPinned, "", true}, {wire.VersioningPinned, "v1.0.0+abc~12", true},
		{wire.VersioningPinned, "v1 0", false}, {wire.VersioningAutoUpgrade, "v1", false}, {"", "v1", false}, {"sticky", "", false},
	} {
		require.Equal(t, c.ok, validVersioning(&wire.StartCommand{Versioning: c.versioning, PinnedBuild: c.build}), "%+v", c)
	}
}
