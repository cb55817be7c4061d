package workerrt_test

import (
	"context"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// queueWorker starts a worker of its own connection on taskQueue, with
// what register adds, and returns its stop function (also called at
// cleanup).
func queueWorker(t *testing.T, s *devstack.Stack, taskQueue string, register func(*harvest.Worker)) func() {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, TaskQueue: taskQueue, ShutdownGrace: 5 * time.Second})
	require.NoError(t, err)
	register(w)
	require.NoError(t, w.Start(natstest.Context(t)))
	stop := func() { require.NoError(t, w.Stop(context.Background())) }
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return stop
}

// TestAnActivityRunsOnTheTaskQueueItNames: render_order runs on task
// queue "mine", served by one worker there; its activity render has
// ActivityOptions.TaskQueue "gpu" and runs only on the worker of "gpu",
// never eagerly on the workflow's worker, which registers render too.
// With the gpu worker stopped, a second execution's activity waits, and
// describe says it waits for render on "gpu"; it runs once a gpu worker
// is back.
func TestAnActivityRunsOnTheTaskQueueItNames(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	host := func(name string) func(*harvest.ActivityContext, string) (string, error) {
		return func(_ *harvest.ActivityContext, in string) (string, error) { return in + " rendered on " + name, nil }
	}
	queueWorker(t, s, "mine", func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "render_order", func(ctx *harvest.WorkflowContext, order string) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "render", order, harvest.ActivityOptions{TaskQueue: "gpu", StartToClose: time.Minute}).Get(&out)
			return out, err
		})
		harvest.RegisterActivity(w, "render", host("mine"))
	})
	gpu := func() func() {
		return queueWorker(t, s, "gpu", func(w *harvest.Worker) { harvest.RegisterActivity(w, "render", host("gpu")) })
	}
	stopGPU := gpu()

	a := stacktest.StartWorkflow(t, s, "render_order", "", `{"input": "o-1", "task_queue": "mine"}`)
	require.Equal(t, 201, a.Status, a.Body)
	done := stacktest.WaitCompleted(t, s, a.Body["execution_id"].(string))
	require.Equal(t, "o-1 rendered on gpu", done["result"])

	stopGPU()
	b := stacktest.StartWorkflow(t, s, "render_order", "", `{"input": "o-2", "task_queue": "mine"}`)
	require.Equal(t, 201, b.Status, b.Body)
	id := b.Body["execution_id"].(string)
	var view map[string]any
	probe.Until(t, 30*time.Second, "describe to say the execution waits for render on gpu", func() bool {
		got := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
		view = got.Body
		waiting, _ := got.Body["waiting_for_workers"].([]any)
		return len(waiting) == 1
	})
	require.Equal(t, []any{map[string]any{"kind": "activity", "name": "render", "task_queue": "gpu"}}, view["waiting_for_workers"])
	require.Equal(t, []any{"render"}, view["waiting_for_activity_workers"])
	require.Equal(t, "Running", view["status"])
	// The task-queue route shows the activity's task waiting, and no
	// worker to take it.
	q := stacktest.Call(t, "GET", s.URL()+"/api/harvest/task-queues/gpu", nil, "")
	require.Equal(t, 200, q.Status, q.Body)
	require.Equal(t, []any{map[string]any{"name": "render", "backlog": 1.0, "workers": []any{}}}, q.Body["activities"], q.Body)

	gpu()
	done = stacktest.WaitCompleted(t, s, id)
	require.Equal(t, "o-2 rendered on gpu", done["result"])
}
