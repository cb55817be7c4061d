package workerrt

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestTasksGoOnlyToWorkersThatRegisterThem: two workers of one task queue
// that register different workflows and activities each get only the
// tasks of their own names, none handed back, and a quiet name's task is
// run while the other names are busy.
func TestTasksGoOnlyToWorkersThatRegisterThem(t *testing.T) {
	var mu sync.Mutex
	ranBy := map[string]string{} // execution id → worker
	complete := func(worker string) WorkflowFunc {
		return func(task *wire.WorkflowTask) (WorkflowRun, error) {
			mu.Lock()
			ranBy[task.ExecutionID] = worker
			mu.Unlock()
			return WorkflowRun{Decisions: []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`1`)}}}, nil
		}
	}
	handlers := func(worker string, workflows, activities []string) Handlers {
		has := func(names []string, name string) bool {
			for _, n := range names {
				if n == name {
					return true
				}
			}
			return false
		}
		return Handlers{
			Workflow:    func(name string) (WorkflowFunc, bool) { return complete(worker), has(workflows, name) },
			HasActivity: func(name string) bool { return has(activities, name) },
			Activity: func(_ context.Context, a *Attempt) (any, error) {
				mu.Lock()
				ranBy[a.Task.ExecutionID] = worker
				mu.Unlock()
				return worker, nil
			},
			Failure: func(err error) *wire.Failure { return &wire.Failure{Message: err.Error()} },
		}
	}
	nc, commands, a := startRuntime(t, Registration{Workflows: []string{"A"}}, handlers("a", []string{"A"}, nil))
	b := runRuntime(t, nc, Registration{Workflows: []string{"B"}, Activities: []string{"C"}}, handlers("b", []string{"B"}, []string{"C"}))

	const each = 30
	want := map[string]string{}
	for i := range each {
		for _, name := range []string{"A", "B"} {
			id := fmt.Sprintf("%s-%d", name, i)
			want[id] = strings.ToLower(name)
			publishTask(t, nc, wire.WorkflowTask{ExecutionID: id, WorkflowName: name, TaskID: 1,
				History: []wire.Event{{Seq: 1, Type: wire.EventWorkflowStarted, Attrs: json.RawMessage(`{}`)}}})
		}
		id := fmt.Sprintf("C-%d", i)
		want[id] = "b"
		publishTask(t, nc, wire.ActivityTask{ExecutionID: id, ActivityID: 1, ActivityName: "C", Input: json.RawMessage(`1`),
			Attempt: 1, Deadline: time.Now().Add(time.Minute)})
	}
	// Each task's result comes back once; none waits for a hand-back's
	// delay, which would outlast this deadline many times over.
	deadline := time.Now().Add(UnknownTaskDelay)
	for range len(want) {
		m, err := commands.NextMsg(time.Until(deadline))
		require.NoError(t, err, "every task runs at once on a worker that registers it")
		var cmd wire.Command
		require.NoError(t, json.Unmarshal(m.Data, &cmd))
	}
	mu.Lock()
	require.Equal(t, want, ranBy, "every task ran on the worker that registers its name")
	mu.Unlock()
	for _, rt := range []*Runtime{a, b} {
		for _, kind := range []string{wire.TaskWorkflow, wire.TaskActivity} {
			for _, reason := range handBackReasons {
				require.Zero(t, testutil.ToFloat64(rt.metrics.handedBack.WithLabelValues(kind, reason)), "%s handed back for %s", kind, reason)
			}
		}
	}
}

// TestConsumerNamesAreUnambiguousAndFit: the consumers of different
// queues and names never share a name, and the longest names JetStream
// would refuse are hashed.
func TestConsumerNamesAreUnambiguousAndFit(t *testing.T) {
	require.Equal(t, "harvest_workflow_7_default_approve_order", NameConsumerName("default", wire.TaskWorkflow, "approve_order"))
	require.NotEqual(t, NameConsumerName("a_b", wire.TaskActivity, "c"), NameConsumerName("a", wire.TaskActivity, "b_c"))
	long := strings.Repeat("q", dedup.MaxNameBytes)
	n := NameConsumerName(long, wire.TaskActivity, strings.Repeat("n", dedup.MaxNameBytes))
	require.LessOrEqual(t, len(n), maxConsumerName)
	require.NotEqual(t, n, NameConsumerName(long, wire.TaskActivity, strings.Repeat("n", dedup.MaxNameBytes-1)+"m"))
	require.NoError(t, dedup.ValidateName(strings.TrimPrefix(n, "harvest_")), "a hashed name is a valid consumer name too")
}
