package workerrt_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestEveryTaskRecordsTheWorkersBuild: the workflow tasks a worker
// completes, the one it ran speculatively after eager activities
// included, record its build id in their WorkflowTaskCompleted; the
// workers route shows the same id, made by default from the binary's
// build and a hash of its workflows.
func TestEveryTaskRecordsTheWorkersBuild(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	started := stacktest.StartWorkflow(t, s, "charge", "build-1", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, started.Status, started.Body)
	id, _ := started.Body["execution_id"].(string)
	stacktest.WaitCompleted(t, s, id)

	workers, err := c.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, workers, 1)
	build := workers[0].BuildID
	require.Regexp(t, `~[0-9a-f]{8}$`, build)

	hist, err := c.History(ctx, id)
	require.NoError(t, err)
	tasks := 0
	for _, ev := range hist {
		if ev.Type != wire.EventWorkflowTaskCompleted {
			continue
		}
		tasks++
		require.Equal(t, build, ev.Attrs["build_id"], "task %v", ev.Attrs["task_id"])
	}
	require.GreaterOrEqual(t, tasks, 2)
}
