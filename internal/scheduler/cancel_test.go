package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// cancelShard is a Memory with one running execution whose first workflow
// task is outstanding, and helpers to drive it.
type cancelShard struct {
	t    *testing.T
	m    *Memory
	now  time.Time
	exec string
	task int
}

func newCancelShard(t *testing.T, cfg MemoryConfig) *cancelShard {
	m, err := NewMemory(cfg)
	require.NoError(t, err)
	c := &cancelShard{t: t, m: m, now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	start := startCmd("saga", "", "saga-1")
	d := c.apply(&start)
	require.Len(t, d.WorkflowTasks, 1)
	c.exec, c.task = d.WorkflowTasks[0].ExecutionID, d.WorkflowTasks[0].TaskID
	return c
}

func (c *cancelShard) apply(cmd *wire.Command) Dispatched {
	c.t.Helper()
	d, err := c.m.Apply(c.t.Context(), c.now, cmd)
	require.NoError(c.t, err)
	for _, task := range d.WorkflowTasks {
		c.task = task.TaskID // the outstanding one
	}
	return d
}

func (c *cancelShard) cancel(reason string, grace time.Duration) wire.Outcome {
	c.t.Helper()
	d := c.apply(&wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel,
		Cancel: &wire.CancelCommand{ExecutionID: c.exec, Reason: reason, GraceMS: grace.Milliseconds()}})
	require.Len(c.t, d.Outcomes, 1)
	return d.Outcomes[0]
}

// complete completes the outstanding task with decisions and returns what
// it dispatched; the next task becomes the outstanding one.
func (c *cancelShard) complete(decisions ...wire.Decision) Dispatched {
	c.t.Helper()
	e, _, _ := c.m.Execution(c.exec)
	d := c.apply(&wire.Command{CommandID: dedup.WorkflowTaskCommandID(c.exec, c.task), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: c.exec, TaskID: c.task, BaseSeq: e.LastSeq, Decisions: decisions}})
	return d
}

func (c *cancelShard) history() []string {
	_, hist, _ := c.m.Execution(c.exec)
	return types(hist)
}

// TestACancelIsARequestTheCodeAnswers: a cancel of a running execution
// records the request once, however often it is sent, and asks for a
// task; the code's cancel_workflow closes it Cancelled with its error.
func TestACancelIsARequestTheCodeAnswers(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{})
	c.complete(decisionSamples[wire.DecisionStartTimer])
	for range 10 {
		out := c.cancel("customer left", 0)
		require.Equal(t, wire.StatusRunning, out.Status)
		require.True(t, out.CancelRequested)
	}
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventTimerStarted, wire.EventWorkflowCancelRequested},
		c.history(), "ten cancels, one request")
	e, hist, _ := c.m.Execution(c.exec)
	require.NotNil(t, e.CancelRequest)
	require.JSONEq(t, `{"reason":"customer left","cause":"request"}`, string(hist[len(hist)-1].Attrs))

	c.complete(wire.Decision{Type: wire.DecisionCancelTimer, TimerID: 1},
		wire.Decision{Type: wire.DecisionCancelWorkflow, Failure: &wire.Failure{Type: "Cancelled", Message: "workflow canceled: customer left"}})
	e, _, _ = c.m.Execution(c.exec)
	require.Equal(t, wire.StatusCancelled, e.Status)
	require.JSONEq(t, `{"type":"Cancelled","message":"workflow canceled: customer left"}`, string(e.Error))
	out := c.cancel("again", 0)
	require.Equal(t, wire.StatusCancelled, out.Status, "a closed execution is left as it ended")
	require.False(t, out.CancelRequested)
}

// TestACancelWithoutARequestIsIgnored: only a run asked to cancel closes
// Cancelled by decision; a worker that says so otherwise is ignored.
func TestACancelWithoutARequestIsIgnored(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{})
	c.complete(wire.Decision{Type: wire.DecisionCancelWorkflow})
	e, _, _ := c.m.Execution(c.exec)
	require.Equal(t, wire.StatusRunning, e.Status)
}

// TestACancelBeforeTheCodeRanClosesAtOnce: an execution whose first task
// is not dispatched yet (a start_at ahead) has nothing to clean up.
func TestACancelBeforeTheCodeRanClosesAtOnce(t *testing.T) {
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	start := startCmd("saga", "", "later-1")
	later := now.Add(time.Hour)
	start.Start.StartAt = &later
	d, err := m.Apply(t.Context(), now, &start)
	require.NoError(t, err)
	require.Empty(t, d.WorkflowTasks)
	id := d.Outcomes[0].ExecutionID
	d, err = m.Apply(t.Context(), now, &wire.Command{CommandID: "c", Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: id}})
	require.NoError(t, err)
	require.Equal(t, wire.StatusCancelled, d.Outcomes[0].Status)
	_, hist, _ := m.Execution(id)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowCancelled}, types(hist))
	d, err = m.FireDue(t.Context(), later)
	require.NoError(t, err)
	require.Empty(t, d.WorkflowTasks, "its start timer does not run it")
}

// TestACancelGraceTerminates: the request's grace, else the workflow's
// configured one, ends in a termination if the code has not closed the
// execution; a closed execution's grace changes nothing.
func TestACancelGraceTerminates(t *testing.T) {
	for _, tc := range []struct {
		name    string
		cfg     MemoryConfig
		request time.Duration
		want    time.Duration
	}{
		{"request", MemoryConfig{}, time.Minute, time.Minute},
		{"configured", MemoryConfig{CancelGraceByWorkflow: map[string]time.Duration{"saga": 5 * time.Minute}}, 0, 5 * time.Minute},
		{"request over configured", MemoryConfig{CancelGraceByWorkflow: map[string]time.Duration{"saga": 5 * time.Minute}}, time.Minute, time.Minute},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := newCancelShard(t, tc.cfg)
			c.complete(decisionSamples[wire.DecisionStartTimer])
			c.cancel("stop", tc.request)
			_, err := c.m.FireDue(t.Context(), c.now.Add(tc.want-time.Second))
			require.NoError(t, err)
			e, _, _ := c.m.Execution(c.exec)
			require.Equal(t, wire.StatusRunning, e.Status, "within its grace")
			_, err = c.m.FireDue(t.Context(), c.now.Add(tc.want))
			require.NoError(t, err)
			e, hist, _ := c.m.Execution(c.exec)
			require.Equal(t, wire.StatusTerminated, e.Status)
			require.Contains(t, string(hist[len(hist)-1].Attrs), "cancel_grace of "+tc.want.String())
		})
	}
	t.Run("closed in time", func(t *testing.T) {
		c := newCancelShard(t, MemoryConfig{})
		c.complete(decisionSamples[wire.DecisionStartTimer])
		c.cancel("stop", time.Minute)
		c.complete(wire.Decision{Type: wire.DecisionCancelWorkflow, Result: json.RawMessage(`"refunded"`)})
		_, err := c.m.FireDue(t.Context(), c.now.Add(time.Hour))
		require.NoError(t, err)
		e, _, _ := c.m.Execution(c.exec)
		require.Equal(t, wire.StatusCancelled, e.Status)
		require.JSONEq(t, `"refunded"`, string(e.Result), "the code's result is kept")
	})
}

// TestAnActivityGivenUpDropsItsResults: request_cancel_activity closes
// the activity as Cancelled, tells its worker, and a result that comes
// later, or a retry's timer, changes nothing.
func TestAnActivityGivenUpDropsItsResults(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{})
	d := c.complete(decisionSamples[wire.DecisionScheduleActivity])
	require.Len(t, d.ActivityTasks, 1)
	c.cancel("stop", 0)
	d = c.complete(wire.Decision{Type: wire.DecisionRequestCancelActivity, ActivityID: 1})
	require.Equal(t, []store.ActivityRef{{ExecutionID: c.exec, ActivityID: 1}}, d.CancelledActivities, "its worker is told")
	d = c.apply(&wire.Command{CommandID: "late", Kind: wire.KindActivityResult, Activity: &wire.ActivityResult{ExecutionID: c.exec, ActivityID: 1,
		Attempt: 1, Result: json.RawMessage(`"charged"`)}})
	require.Empty(t, d.WorkflowTasks)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventWorkflowCancelRequested,
		wire.EventWorkflowTaskCompleted, wire.EventActivityCancelRequested}, c.history(), "the late result is not recorded")
	_, err := c.m.FireDue(t.Context(), c.now.Add(24*time.Hour))
	require.NoError(t, err)
	require.Equal(t, wire.EventActivityCancelRequested, c.history()[len(c.history())-1], "no timeout or retry of it follows")
}

// TestACancelRequestFollowsAContinueAsNew: a request that reaches a run
// whose outstanding task then continues it as new is the chain's: the
// next run starts asked to cancel, with what is left of the grace.
func TestACancelRequestFollowsAContinueAsNew(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{})
	c.complete(decisionSamples[wire.DecisionStartTimer])
	c.cancel("stop", time.Minute)
	c.now = c.now.Add(10 * time.Second)
	c.complete(decisionSamples[wire.DecisionContinueAsNew])
	first, _, _ := c.m.Execution(c.exec)
	require.Equal(t, wire.StatusContinuedAsNew, first.Status)
	next, hist, _ := c.m.Execution(first.ContinuedAs)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowCancelRequested}, types(hist))
	require.NotNil(t, next.CancelRequest)
	require.Equal(t, first.CancelRequest.Deadline, next.CancelRequest.Deadline, "the grace is the request's, not renewed")
	_, err := c.m.FireDue(t.Context(), *next.CancelRequest.Deadline)
	require.NoError(t, err)
	next, _, _ = c.m.Execution(next.ExecutionID)
	require.Equal(t, wire.StatusTerminated, next.Status)
}
