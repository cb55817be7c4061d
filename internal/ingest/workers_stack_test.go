package ingest_test

import (
	"os"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// nameOf is the entry of name in list, and whether there is one.
func nameOf(list []client.NameBacklog, name string) (client.NameBacklog, bool) {
	i := slices.IndexFunc(list, func(n client.NameBacklog) bool { return n.Name == name })
	if i < 0 {
		return client.NameBacklog{}, false
	}
	return list[i], true
}

// TestWhyAnExecutionDoesNotRunIsAnswered: the stack's worker is listed
// with who it is; an execution of a declared workflow no worker serves,
// and one waiting for an activity no worker registers, show on their
// task queue as a backlog with no worker; once a worker of the workflow
// comes, it is listed, serves the name, and the backlog drains.
func TestWhyAnExecutionDoesNotRunIsAnswered(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{DeclaredWorkflows: []string{"why_declared"}},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "why_misspelt", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				var out string
				err := harvest.ExecuteActivity(ctx, "chrage_card", nil).Get(&out)
				return out, err
			})
		},
	})
	ctx := natstest.Context(t)
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)

	ws, err := c.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 1)
	stackWorker := ws[0]
	require.Equal(t, os.Getpid(), stackWorker.PID)
	require.Equal(t, wire.DefaultTaskQueue, stackWorker.TaskQueue)
	require.Contains(t, stackWorker.Workflows, "why_misspelt")
	require.NotContains(t, stackWorker.Workflows, "why_declared")
	require.NotNil(t, stackWorker.Slots, "the worker says how busy it is")
	require.Equal(t, harvest.DefaultWorkflowTaskConcurrency, stackWorker.Slots.Workflow.Size)
	require.Equal(t, harvest.DefaultActivityConcurrency, stackWorker.Slots.Activity.Size)

	declared := stacktest.StartWorkflow(t, s, "why_declared", "", `{"input": {}}`)
	require.Equal(t, 201, declared.Status, declared.Body)
	declaredID := declared.Body["execution_id"].(string)
	require.Equal(t, true, describe(t, s, declaredID).Body["waiting_for_worker"])
	misspelt := stacktest.StartWorkflow(t, s, "why_misspelt", "", `{}`)
	require.Equal(t, 201, misspelt.Status, misspelt.Body)

	var q *client.TaskQueueResponse
	probe.Until(t, 30*time.Second, "both to show as waiting for a worker", func() bool {
		q, err = c.TaskQueue(ctx, wire.DefaultTaskQueue)
		require.NoError(t, err)
		wf, ok := nameOf(q.Workflows, "why_declared")
		act, ok2 := nameOf(q.Activities, "chrage_card")
		return ok && wf.Backlog == 1 && len(wf.Workers) == 0 && ok2 && act.Backlog == 1 && len(act.Workers) == 0
	})
	served, ok := nameOf(q.Workflows, "why_misspelt")
	require.True(t, ok, "a name a live worker registered is listed with no backlog")
	require.Equal(t, []string{stackWorker.ID}, served.Workers)

	// A worker of the declared workflow comes.
	echoWorker(t, s, "why_declared")
	stacktest.WaitCompleted(t, s, declaredID)
	ws, err = c.Workers(ctx)
	require.NoError(t, err)
	require.Len(t, ws, 2)
	var echo client.Worker
	for _, w := range ws {
		if w.ID != stackWorker.ID {
			echo = w
		}
	}
	require.Equal(t, []string{"why_declared"}, echo.Workflows)
	probe.Until(t, 30*time.Second, "the declared workflow's backlog to drain", func() bool {
		q, err = c.TaskQueue(ctx, wire.DefaultTaskQueue)
		require.NoError(t, err)
		wf, ok := nameOf(q.Workflows, "why_declared")
		return ok && wf.Backlog == 0 && slices.Equal(wf.Workers, []string{echo.ID})
	})
}
