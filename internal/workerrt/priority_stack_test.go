package workerrt_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// ranked is one task a test's worker ran: its place among the tasks
// queued, and its priority.
type ranked struct {
	Seq      int `json:"seq"`
	Priority int `json:"priority"`
}

// runOrder records the tasks a worker runs, each once.
type runOrder struct {
	mu   sync.Mutex
	seen map[int]bool
	ran  []ranked
}

func (o *runOrder) add(r ranked) {
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.seen == nil {
		o.seen = map[int]bool{}
	}
	if !o.seen[r.Seq] {
		o.seen[r.Seq] = true
		o.ran = append(o.ran, r)
	}
}

func (o *runOrder) all() []ranked {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ran)
}

// byPriority is queued as a worker should take it: higher priority
// first, then in the order queued.
func byPriority(queued []ranked) []ranked {
	want := slices.Clone(queued)
	slices.SortStableFunc(want, func(a, b ranked) int { return cmp.Compare(b.Priority, a.Priority) })
	return want
}

// backlogOf is how many tasks of kind for name wait on task queue.
func backlogOf(t *testing.T, s *devstack.Stack, queue, kind, name string) uint64 {
	t.Helper()
	b, err := s.Topology.TaskBacklog(t.Context(), queue)
	require.NoError(t, err)
	return b.Named[kind][name]
}

// oneAtATime starts a worker on queue that runs one task of each kind at
// a time, with what register adds.
func oneAtATime(t *testing.T, s *devstack.Stack, queue string, register func(*harvest.Worker)) {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, TaskQueue: queue, ShutdownGrace: 5 * time.Second,
		WorkflowTaskConcurrency: 1, ActivityConcurrency: 1})
	require.NoError(t, err)
	register(w)
	require.NoError(t, w.Start(natstest.Context(t)))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
}

// TestHigherPrioritiesAreTakenFirst queues workflow tasks, then activity
// tasks, at every priority before any worker takes them, and checks that
// a worker running one at a time runs them highest priority first and,
// within one priority, in the order they were queued. An activity
// without a priority of its own runs at its execution's. A priority out
// of range is refused; the execution shows its own.
func TestHigherPrioritiesAreTakenFirst(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{DeclaredWorkflows: []string{"ranked_flow"}}})

	for _, bad := range []string{"0", "6", "-1"} {
		got := stacktest.StartWorkflow(t, s, "ranked_flow", "", `{"priority": `+bad+`}`)
		require.Equal(t, 400, got.Status, got.Body)
		require.Equal(t, "invalid_priority", got.Body["error"], got.Body)
		require.Equal(t, "priority", got.Body["field"], got.Body)
	}
	sws := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/ranked_flow/signal-with-start", nil,
		`{"workflow_id": "ranked-sws", "signal_name": "go", "priority": 7}`)
	require.Equal(t, 400, sws.Status, sws.Body)
	require.Equal(t, "invalid_priority", sws.Body["error"], sws.Body)

	// Workflow tasks: 15 starts, the priorities mixed, each one's task in
	// the stream before the next start, so that the stream holds them in
	// the order of their starts.
	var queued []ranked
	var ids []string
	for i := range 15 {
		r := ranked{Seq: i, Priority: []int{2, 5, 3, 1, 4, 5, 3}[i%7]}
		queued = append(queued, r)
		got := stacktest.StartWorkflow(t, s, "ranked_flow", "", fmt.Sprintf(`{"priority": %d, "input": {"seq": %d, "priority": %d}}`, r.Priority, r.Seq, r.Priority))
		require.Equal(t, 201, got.Status, got.Body)
		ids = append(ids, got.Body["execution_id"].(string))
		probe.Until(t, 30*time.Second, "the start's workflow task to be in the stream", func() bool {
			return backlogOf(t, s, wire.DefaultTaskQueue, wire.TaskWorkflow, "ranked_flow") == uint64(i+1)
		})
	}
	view := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+ids[1], nil, "")
	require.Equal(t, float64(5), view.Body["priority"], view.Body)

	var flows runOrder
	oneAtATime(t, s, wire.DefaultTaskQueue, func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "ranked_flow", func(_ *harvest.WorkflowContext, in ranked) (int, error) {
			flows.add(in)
			return in.Seq, nil
		})
	})
	for _, id := range ids {
		stacktest.WaitCompleted(t, s, id)
	}
	require.Equal(t, byPriority(queued), flows.all())

	// Activity tasks: one execution at priority 2 schedules 12 at once,
	// some without a priority (so at 2), on a queue whose only worker
	// does not register the activity; a worker that does starts once
	// they are all in the stream.
	queued = nil
	for i := range 12 {
		own := []int{0, 5, 1, 4, 0, 3}[i%6]
		queued = append(queued, ranked{Seq: i, Priority: cmp.Or(own, 2)})
	}
	queueWorker(t, s, "fans", func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "ranked_fan", func(ctx *harvest.WorkflowContext, _ struct{}) (int, error) {
			var futures []*harvest.Future
			for i := range 12 {
				own := []int{0, 5, 1, 4, 0, 3}[i%6]
				futures = append(futures, harvest.ExecuteActivity(ctx, "ranked_step", ranked{Seq: i, Priority: cmp.Or(own, 2)},
					harvest.ActivityOptions{Priority: own, StartToClose: time.Minute}))
			}
			for _, f := range futures {
				if err := f.Get(nil); err != nil {
					return 0, err
				}
			}
			return len(futures), nil
		})
	})
	fan := stacktest.StartWorkflow(t, s, "ranked_fan", "", `{"task_queue": "fans", "priority": 2}`)
	require.Equal(t, 201, fan.Status, fan.Body)
	probe.Until(t, 30*time.Second, "the 12 activity tasks to be in the stream", func() bool {
		return backlogOf(t, s, "fans", wire.TaskActivity, "ranked_step") == 12
	})
	var steps runOrder
	oneAtATime(t, s, "fans", func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "ranked_step", func(_ *harvest.ActivityContext, in ranked) (int, error) {
			steps.add(in)
			return in.Seq, nil
		})
	})
	done := stacktest.WaitCompleted(t, s, fan.Body["execution_id"].(string))
	require.Equal(t, float64(12), done["result"])
	require.Equal(t, byPriority(queued), steps.all())
}
