package workerrt

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestRuntimeCountsTasks: the worker's metrics count the tasks received,
// completed, failed and handed back, by kind, how long it held them, and
// the attempts running; on the registry given, under their names.
func TestRuntimeCountsTasks(t *testing.T) {
	complete := func(task *wire.WorkflowTask) (WorkflowRun, error) {
		return WorkflowRun{Decisions: []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`1`)}}, Events: len(task.History)}, nil
	}
	broken := func(*wire.WorkflowTask) (WorkflowRun, error) { return WorkflowRun{}, errors.New("nondeterminism") }
	nc, commands, rt := startRuntime(t, Registration{Workflows: []string{"hello", "broken"}, Activities: []string{"double"}}, Handlers{
		Workflow: func(name string) (WorkflowFunc, bool) {
			switch name {
			case "hello":
				return complete, true
			case "broken":
				return broken, true
			}
			return nil, false
		},
		HasActivity: func(name string) bool { return name == "double" },
		Activity:    double(errors.New("negative")),
		Failure:     func(err error) *wire.Failure { return &wire.Failure{Message: err.Error()} },
	}, func(rt *Runtime) {
		// The queue's consumer of unrouted tasks, as an older deployment
		// left it: the worker drains it, and hands back what it does not
		// register.
		_, err := rt.js.CreateOrUpdateConsumer(natstest.Context(t), broker.TaskStream, jetstream.ConsumerConfig{
			Durable: ConsumerName(wire.DefaultTaskQueue, wire.TaskActivity), FilterSubject: broker.TaskSubject(wire.DefaultTaskQueue, wire.TaskActivity),
			AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
	})
	task := wire.ActivityTask{ExecutionID: "e1", ActivityID: 1, ActivityName: "double", Input: json.RawMessage(`21`),
		Attempt: 1, Deadline: time.Now().Add(time.Minute)}
	publishTask(t, nc, task)
	task.ExecutionID, task.Input, task.Attempt = "e2", json.RawMessage(`-1`), 2
	publishTask(t, nc, task)
	task.ExecutionID, task.ActivityName = "e3", "elsewhere"
	publishUnrouted(t, nc, wire.TaskActivity, task)
	publishTask(t, nc, wire.WorkflowTask{ExecutionID: "e4", WorkflowName: "hello", TaskID: 1,
		History: []wire.Event{{Seq: 1, Type: wire.EventWorkflowStarted, Attrs: json.RawMessage(`{}`)}}})
	publishTask(t, nc, wire.WorkflowTask{ExecutionID: "e5", WorkflowName: "broken", TaskID: 1})
	for range 3 { // e1's result, e2's failure, e4's decisions
		nextCommand(t, commands)
	}

	m := rt.metrics
	value := func(c *prometheus.CounterVec, kind string) float64 {
		return testutil.ToFloat64(c.WithLabelValues(kind))
	}
	require.Eventually(t, func() bool {
		return value(m.completed, wire.TaskActivity) == 1 && value(m.failed, wire.TaskActivity) == 1 &&
			testutil.ToFloat64(m.handedBack.WithLabelValues(wire.TaskActivity, handBackUnknown)) >= 1 && value(m.received, wire.TaskActivity) >= 3 &&
			value(m.completed, wire.TaskWorkflow) == 1 && value(m.failed, wire.TaskWorkflow) >= 1 &&
			value(m.received, wire.TaskWorkflow) >= 2
	}, 10*time.Second, 20*time.Millisecond)
	require.Zero(t, testutil.ToFloat64(m.running))

	// By workflow and activity: each registered name, other for the rest.
	require.Equal(t, 1.0, testutil.ToFloat64(m.workflowTasks.WithLabelValues("hello", "completed")))
	require.GreaterOrEqual(t, testutil.ToFloat64(m.workflowTasks.WithLabelValues("broken", "failed")), 1.0)
	require.Equal(t, 1.0, testutil.ToFloat64(m.replays.WithLabelValues("hello", replayTask)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.replayEvents.WithLabelValues("hello")), "hello's task consumed one event")
	require.Equal(t, 1.0, testutil.ToFloat64(m.cache.WithLabelValues("hello", cacheMiss)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.attempts.WithLabelValues("double", attemptCompleted)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.attempts.WithLabelValues("double", attemptFailed)))
	require.Zero(t, testutil.ToFloat64(m.attempts.WithLabelValues("double", attemptTimedOut)))
	require.Equal(t, 1.0, testutil.ToFloat64(m.retries.WithLabelValues("double")), "e2's attempt 2 was a retry")
	require.Zero(t, testutil.ToFloat64(m.ledger.WithLabelValues("double", LedgerHit)))
	// Every task received is settled or still held.
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.inFlight.WithLabelValues(wire.TaskActivity)) == value(m.received, wire.TaskActivity)-
			value(m.completed, wire.TaskActivity)-value(m.failed, wire.TaskActivity)-
			testutil.ToFloat64(m.handedBack.WithLabelValues(wire.TaskActivity, handBackUnknown))-testutil.ToFloat64(m.handedBack.WithLabelValues(wire.TaskActivity, handBackStopping))
	}, 10*time.Second, 20*time.Millisecond)

	reg := rt.cfg.Metrics.(*prometheus.Registry)
	families, err := reg.Gather()
	require.NoError(t, err)
	names := map[string]bool{}
	for _, f := range families {
		names[f.GetName()] = true
		for _, s := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range s.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			require.Equal(t, wire.DefaultTaskQueue, labels["task_queue"], f.GetName())
			for _, name := range []string{"workflow", "activity"} {
				if v, ok := labels[name]; ok {
					require.Contains(t, []string{"hello", "broken", "double", "other"}, v, "%s: only registered names, or other", f.GetName())
				}
			}
		}
		if f.GetName() == "harvest_worker_task_duration_seconds" {
			var n uint64
			for _, s := range f.GetMetric() {
				n += s.GetHistogram().GetSampleCount()
			}
			require.GreaterOrEqual(t, n, uint64(5))
		}
	}
	for _, name := range []string{"harvest_worker_tasks_received_total", "harvest_worker_tasks_completed_total",
		"harvest_worker_tasks_failed_total", "harvest_worker_tasks_handed_back_total",
		"harvest_worker_activity_attempts_running", "harvest_worker_task_duration_seconds", "harvest_worker_tasks_in_flight",
		"harvest_worker_workflow_tasks_total", "harvest_worker_workflow_replays_total", "harvest_worker_workflow_replay_events_total",
		"harvest_worker_workflow_replay_duration_seconds", "harvest_worker_activity_attempts_total",
		"harvest_worker_activity_attempt_duration_seconds", "harvest_worker_activity_retries_total",
		"harvest_worker_activity_heartbeats_total", "harvest_worker_ledger_calls_total"} {
		require.True(t, names[name], name)
	}
}

// TestWorkersShareARegistry: two workers of one process register on one
// registry, each under its task queue; without a registry nothing is
// registered, and counting still works.
func TestWorkersShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	a, err := newMetrics(reg, "a")
	require.NoError(t, err)
	b, err := newMetrics(reg, "b")
	require.NoError(t, err)
	also, err := newMetrics(reg, "a")
	require.NoError(t, err)
	a.received.WithLabelValues(wire.TaskActivity).Inc()
	also.received.WithLabelValues(wire.TaskActivity).Inc()
	b.received.WithLabelValues(wire.TaskActivity).Inc()
	require.Equal(t, 2.0, testutil.ToFloat64(a.received.WithLabelValues(wire.TaskActivity)))
	require.Equal(t, 1.0, testutil.ToFloat64(b.received.WithLabelValues(wire.TaskActivity)))

	none, err := newMetrics(nil, "a")
	require.NoError(t, err)
	none.settled(wire.TaskWorkflow, outcomeCompleted, time.Millisecond)
	require.Equal(t, 1.0, testutil.ToFloat64(none.completed.WithLabelValues(wire.TaskWorkflow)))
}
