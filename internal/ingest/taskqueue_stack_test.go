package ingest_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// approveWorker starts a worker of its own, on a connection of its own,
// pulling task queue "mine" only and serving approve_order and
// approve_configured, each approving the order its input names.
func approveWorker(t *testing.T, s *devstack.Stack) {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, TaskQueue: "mine", ShutdownGrace: 5 * time.Second})
	require.NoError(t, err)
	type order struct {
		OrderID string `json:"order_id"`
	}
	approve := func(ctx *harvest.WorkflowContext, in order) (map[string]any, error) {
		return map[string]any{"approved": in.OrderID, "task_queue": ctx.Info().TaskQueue}, nil
	}
	harvest.RegisterWorkflow(w, "approve_order", approve)
	harvest.RegisterWorkflow(w, "approve_configured", approve)
	require.NoError(t, w.Start(natstest.Context(t)))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// TestAWorkflowServedOnItsOwnTaskQueueRunsThere: approve_order is served
// by one worker, on task queue "mine", and declared nowhere. A start
// that names "mine" (or a signal-with-start) is answered 201, runs on
// that worker and completes, its execution showing its task queue; the
// same start without task_queue goes to the default queue, which no
// worker serves it on, and is 404 unknown_workflow naming that queue,
// publishing nothing. approve_configured is configured on "mine"
// (workflows.<name>.task_queue): a start that names no queue goes there.
func TestAWorkflowServedOnItsOwnTaskQueueRunsThere(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{TaskQueues: map[string]string{"approve_configured": "mine"}}})
	approveWorker(t, s)

	before := lastCommandSeq(t, s)
	for _, key := range []string{"", "approve-1"} {
		a := stacktest.StartWorkflow(t, s, "approve_order", key, `{"input": {"order_id": "o-1"}}`)
		require.Equal(t, 404, a.Status, a.Body)
		require.Equal(t, "unknown_workflow", a.Body["error"])
		require.Contains(t, a.Body["message"], `no worker serves workflow "approve_order" on task queue "default" and the configuration does not declare it`)
	}
	swst := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/approve_order/signal-with-start", nil,
		`{"workflow_id": "o-2", "signal_name": "approve"}`)
	require.Equal(t, 404, swst.Status, swst.Body)
	require.Contains(t, swst.Body["message"], `on task queue "default"`)
	require.Equal(t, before, lastCommandSeq(t, s), "nothing was published")

	a := stacktest.StartWorkflow(t, s, "approve_order", "approve-1", `{"input": {"order_id": "o-1"}, "task_queue": "mine"}`)
	require.Equal(t, 201, a.Status, a.Body)
	done := stacktest.WaitCompleted(t, s, a.Body["execution_id"].(string))
	require.Equal(t, "mine", done["task_queue"])
	require.Equal(t, map[string]any{"approved": "o-1", "task_queue": "mine"}, done["result"], "the worker on mine ran it")

	swst = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/approve_order/signal-with-start", nil,
		`{"workflow_id": "o-2", "input": {"order_id": "o-2"}, "signal_name": "approve", "task_queue": "mine"}`)
	require.Equal(t, 201, swst.Status, swst.Body)
	done = stacktest.WaitCompleted(t, s, swst.Body["execution_id"].(string))
	require.Equal(t, "mine", done["task_queue"])

	c := stacktest.StartWorkflow(t, s, "approve_configured", "", `{"input": {"order_id": "o-3"}}`)
	require.Equal(t, 201, c.Status, c.Body)
	done = stacktest.WaitCompleted(t, s, c.Body["execution_id"].(string))
	require.Equal(t, "mine", done["task_queue"])
	require.Equal(t, map[string]any{"approved": "o-3", "task_queue": "mine"}, done["result"])

	// The stack's own worker serves the examples on the default queue.
	onboarding := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, onboarding.Status, onboarding.Body)
	require.Equal(t, "default", describe(t, s, onboarding.Body["execution_id"].(string)).Body["task_queue"])
}
