package workerrt_test

import (
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// noKeepers leaves the streams without keepers (broker.Topology.Keep),
// whose messages would count among tasksPublished's.
var noKeepers = scheduler.Config{KeepInterval: -1}

// tasksPublished is how many tasks the stack's task stream has stored.
func tasksPublished(t *testing.T, s *devstack.Stack) uint64 {
	t.Helper()
	st, err := s.Topology.JS.Stream(t.Context(), broker.TaskStream)
	require.NoError(t, err)
	info, err := st.Info(t.Context())
	require.NoError(t, err)
	return info.State.LastSeq
}

// TestEagerDispatch runs workflows whose activities run on the worker that
// scheduled them, and checks what that saves and what it keeps: one task
// message instead of three for a one-activity workflow, the same history,
// and the key the scheduler records is the one the attempt handed out.
func TestEagerDispatch(t *testing.T) {
	t.Parallel()
	var (
		mu   sync.Mutex
		keys = map[string][]string{} // by execution
	)
	register := func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "eager_echo", func(ctx *harvest.ActivityContext, in string) (string, error) {
			mu.Lock()
			keys[ctx.Info().ExecutionID] = append(keys[ctx.Info().ExecutionID], ctx.IdempotencyKey().String())
			mu.Unlock()
			return in + "!", nil
		})
		harvest.RegisterWorkflow(w, "eager_one", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			var out string
			return out, harvest.ExecuteActivity(ctx, "eager_echo", in).Get(&out)
		})
		harvest.RegisterWorkflow(w, "eager_pair", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			a, b := harvest.ExecuteActivity(ctx, "eager_echo", in+"a"), harvest.ExecuteActivity(ctx, "eager_echo", in+"b")
			var x, y string
			if err := a.Get(&x); err != nil {
				return "", err
			}
			if err := b.Get(&y); err != nil {
				return "", err
			}
			return x + y, nil
		})
		harvest.RegisterWorkflow(w, "eager_chain", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			var x, y string
			if err := harvest.ExecuteActivity(ctx, "eager_echo", in).Get(&x); err != nil {
				return "", err
			}
			if err := harvest.ExecuteActivity(ctx, "eager_echo", x).Get(&y); err != nil {
				return "", err
			}
			return y, nil
		})
	}
	s := stacktest.Start(t, devstack.Config{Register: register, Scheduler: noKeepers})

	run := func(workflow string) (map[string]any, uint64) {
		t.Helper()
		before := tasksPublished(t, s)
		r := stacktest.StartWorkflow(t, s, workflow, "", `{"input": "hi"}`)
		require.Equal(t, 201, r.Status, r.Body)
		exec := stacktest.WaitCompleted(t, s, r.Body["execution_id"].(string))
		return exec, tasksPublished(t, s) - before
	}

	exec, tasks := run("eager_one")
	require.Equal(t, "hi!", exec["result"])
	require.EqualValues(t, 1, tasks, "the first workflow task carried the activity and the next task")
	id := exec["execution_id"].(string)
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"}, stacktest.HistoryTypes(t, s, id))
	h := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	scheduled := h.Body["events"].([]any)[2].(map[string]any)
	mu.Lock()
	require.Equal(t, []string{scheduled["idempotency_key"].(string)}, keys[id], "the attempt's key is the recorded one")
	mu.Unlock()

	// Two activities scheduled by one task run side by side.
	exec, tasks = run("eager_pair")
	require.Equal(t, "hia!hib!", exec["result"])
	require.EqualValues(t, 1, tasks)

	// The second activity of a chain is scheduled by the speculative task:
	// the scheduler dispatches it, and the task that follows its result.
	exec, tasks = run("eager_chain")
	require.Equal(t, "hi!!", exec["result"])
	require.EqualValues(t, 3, tasks)
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"},
		stacktest.HistoryTypes(t, s, exec["execution_id"].(string)))

	// With eager dispatch off, every attempt goes through the task stream.
	off := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: true}, Register: register, Scheduler: noKeepers})
	before := tasksPublished(t, off)
	r := stacktest.StartWorkflow(t, off, "eager_one", "", `{"input": "hi"}`)
	require.Equal(t, 201, r.Status, r.Body)
	require.Equal(t, "hi!", stacktest.WaitCompleted(t, off, r.Body["execution_id"].(string))["result"])
	require.EqualValues(t, 3, tasksPublished(t, off)-before)
}
