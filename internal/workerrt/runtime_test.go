package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// startRuntime declares a deployment of one shard, starts a runtime
// registering reg's names with h on the default task queue, and
// subscribes to the commands it publishes.
func startRuntime(t *testing.T, reg Registration, h Handlers, before ...func(*Runtime)) (nc *nats.Conn, commands *nats.Subscription, rt *Runtime) {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	_, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 1})
	require.NoError(t, err)
	commands, err = nc.SubscribeSync(broker.CommandFilter(0))
	require.NoError(t, err)
	return nc, commands, runRuntime(t, nc, reg, h, before...)
}

// runRuntime starts a runtime registering reg's names with h on the
// default task queue, its metrics on a registry of its own, and stops it
// at cleanup.
func runRuntime(t *testing.T, nc *nats.Conn, reg Registration, h Handlers, before ...func(*Runtime)) *Runtime {
	t.Helper()
	ctx := natstest.Context(t)
	rt, err := New(harvesttype.WorkerConfig{
		NATS: nc, TaskQueue: wire.DefaultTaskQueue, ActivityConcurrency: 2, WorkflowTaskConcurrency: 1,
		TaskAckWait: 5 * time.Second, ShutdownGrace: 5 * time.Second, Metrics: prometheus.NewRegistry(), Logger: slog.New(slog.DiscardHandler),
	}, h)
	require.NoError(t, err)
	require.NoError(t, rt.Bind(ctx, reg))
	for _, f := range before {
		f(rt)
	}
	stop, err := rt.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop(context.Background())) })
	return rt
}

// publishTask publishes task (a wire.WorkflowTask or wire.ActivityTask)
// on the default task queue, to the subject of its name, as a scheduler
// does.
func publishTask(t *testing.T, nc *nats.Conn, task any) {
	t.Helper()
	data, err := json.Marshal(task)
	require.NoError(t, err)
	var subject string
	switch task := task.(type) {
	case wire.WorkflowTask:
		subject = broker.NameTaskSubject(wire.DefaultTaskQueue, wire.TaskWorkflow, task.WorkflowName)
	case wire.ActivityTask:
		subject = broker.NameTaskSubject(wire.DefaultTaskQueue, wire.TaskActivity, task.ActivityName)
	default:
		t.Fatalf("publishTask: %T is no task", task)
	}
	require.NoError(t, nc.Publish(subject, data))
}

// publishUnrouted publishes task of kind on the default task queue's
// subject of unrouted tasks, as a scheduler older than routing by name
// did.
func publishUnrouted(t *testing.T, nc *nats.Conn, kind string, task any) {
	t.Helper()
	data, err := json.Marshal(task)
	require.NoError(t, err)
	require.NoError(t, nc.Publish(broker.TaskSubject(wire.DefaultTaskQueue, kind), data))
}

func nextCommand(t *testing.T, sub *nats.Subscription) wire.Command {
	t.Helper()
	m, err := sub.NextMsg(10 * time.Second)
	require.NoError(t, err)
	var cmd wire.Command
	require.NoError(t, json.Unmarshal(m.Data, &cmd))
	return cmd
}

// double is the activity "double": twice its input, or negative for a
// negative one.
func double(negative error) func(context.Context, *Attempt) (any, error) {
	return func(_ context.Context, a *Attempt) (any, error) {
		var n int
		if err := json.Unmarshal(a.Task.Input, &n); err != nil {
			return nil, err
		}
		if n < 0 {
			return nil, negative
		}
		return 2 * n, nil
	}
}

// TestRuntimeReportsActivityAttempts: the runtime runs an activity task
// with the SDK's Activity handler and reports its result, or the wire
// form the Failure handler gives its error.
func TestRuntimeReportsActivityAttempts(t *testing.T) {
	nc, commands, _ := startRuntime(t, Registration{Activities: []string{"double"}}, Handlers{
		Workflow:    func(string) (WorkflowFunc, bool) { return nil, false },
		HasActivity: func(name string) bool { return name == "double" },
		Activity:    double(errors.New("boom")),
		Failure:     func(err error) *wire.Failure { return &wire.Failure{Type: "test", Message: err.Error()} },
	})
	task := wire.ActivityTask{ExecutionID: "e1", ActivityID: 1, ActivityName: "double", Input: json.RawMessage(`21`),
		Attempt: 1, Deadline: time.Now().Add(time.Minute)}
	publishTask(t, nc, task)
	cmd := nextCommand(t, commands)
	require.Equal(t, wire.KindActivityResult, cmd.Kind)
	require.Equal(t, "e1", cmd.Activity.ExecutionID)
	require.JSONEq(t, `42`, string(cmd.Activity.Result))
	require.Nil(t, cmd.Activity.Failure)

	task.ExecutionID, task.Input = "e2", json.RawMessage(`-1`)
	publishTask(t, nc, task)
	cmd = nextCommand(t, commands)
	require.Equal(t, "e2", cmd.Activity.ExecutionID)
	require.Equal(t, &wire.Failure{Type: "test", Message: "boom"}, cmd.Activity.Failure)
}

// TestRuntimeRunsActivitiesEagerly: a workflow task that only schedules
// an activity the worker has is reported in one command with the eager
// attempt's result and the next workflow task, replayed over the history
// the scheduler will write.
func TestRuntimeRunsActivitiesEagerly(t *testing.T) {
	replay := func(task *wire.WorkflowTask) (WorkflowRun, error) {
		for _, ev := range task.History {
			if ev.Type == wire.EventActivityCompleted {
				var a wire.ActivityClosedAttrs
				if err := json.Unmarshal(ev.Attrs, &a); err != nil {
					return WorkflowRun{}, err
				}
				return WorkflowRun{Decisions: []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: a.Result}}}, nil
			}
		}
		return WorkflowRun{Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "greet", Input: json.RawMessage(`"ada"`)}}}, nil
	}
	nc, commands, _ := startRuntime(t, Registration{Workflows: []string{"hello"}, Activities: []string{"greet"}}, Handlers{
		Workflow:    func(name string) (WorkflowFunc, bool) { return replay, name == "hello" },
		HasActivity: func(name string) bool { return name == "greet" },
		Activity: func(_ context.Context, a *Attempt) (any, error) {
			var who string
			if err := json.Unmarshal(a.Task.Input, &who); err != nil {
				return nil, err
			}
			return "hello " + who, nil
		},
		Failure: func(err error) *wire.Failure { return &wire.Failure{Message: err.Error()} },
	})
	started, err := json.Marshal(wire.WorkflowStartedAttrs{})
	require.NoError(t, err)
	publishTask(t, nc, wire.WorkflowTask{ExecutionID: "e1", WorkflowName: "hello", TaskID: 1,
		History: []wire.Event{{Seq: 1, Type: wire.EventWorkflowStarted, Attrs: started}}})
	cmd := nextCommand(t, commands)
	require.Equal(t, wire.KindWorkflowTaskCompleted, cmd.Kind)
	res := cmd.WorkflowTask
	require.Len(t, res.Decisions, 1)
	require.False(t, res.Decisions[0].PossiblyStarted)
	require.Len(t, res.Eager, 1)
	require.JSONEq(t, `"hello ada"`, string(res.Eager[0].Result))
	require.NotNil(t, res.Next)
	require.Equal(t, 2, res.Next.TaskID)
	require.Equal(t, 4, res.Next.BaseSeq, "started, task completed, scheduled, completed")
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"hello ada"`)}}, res.Next.Decisions)
}
