package scheduler

import (
	"encoding/json"
	"strings"
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
	c.track(d)
	return d
}

// fire fires the timers due at at, as the shard's timer loop does.
func (c *cancelShard) fire(at time.Time) {
	c.t.Helper()
	d, err := c.m.FireDue(c.t.Context(), at)
	require.NoError(c.t, err)
	c.track(d)
}

// track takes, from what an apply dispatched, the execution's workflow
// task: the outstanding one.
func (c *cancelShard) track(d Dispatched) {
	for _, task := range d.WorkflowTasks {
		if task.ExecutionID == c.exec {
			c.task = task.TaskID
		}
	}
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

// TestAnActivityGivenUpWaitsForItsAttempt: request_cancel_activity tells
// the activity's worker and marks it given up; its attempt in flight then
// closes it: Completed if it completed after all (the workflow sees the
// step taken), else Cancelled, with no attempt after it; a given-up
// activity waiting for its retry closes Cancelled when the wait ends.
func TestAnActivityGivenUpWaitsForItsAttempt(t *testing.T) {
	start := func(t *testing.T) *cancelShard {
		c := newCancelShard(t, MemoryConfig{})
		d := c.complete(decisionSamples[wire.DecisionScheduleActivity])
		require.Len(t, d.ActivityTasks, 1)
		c.cancel("stop", 0)
		d = c.complete(wire.Decision{Type: wire.DecisionRequestCancelActivity, ActivityID: 1})
		require.Equal(t, []store.ActivityRef{{ExecutionID: c.exec, ActivityID: 1}}, d.CancelledActivities, "its worker is told")
		return c
	}
	result := func(c *cancelShard, attempt int, r json.RawMessage, f *wire.Failure) Dispatched {
		return c.apply(&wire.Command{CommandID: dedup.NewID(), Kind: wire.KindActivityResult, Activity: &wire.ActivityResult{ExecutionID: c.exec,
			ActivityID: 1, Attempt: attempt, Result: r, Failure: f}})
	}
	base := []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled, wire.EventWorkflowCancelRequested,
		wire.EventWorkflowTaskCompleted, wire.EventActivityCancelRequested}
	t.Run("completed after all", func(t *testing.T) {
		c := start(t)
		d := result(c, 1, json.RawMessage(`"charged"`), nil)
		require.Len(t, d.WorkflowTasks, 1, "the code sees the step taken")
		require.Equal(t, append(base, wire.EventActivityCompleted), c.history())
	})
	t.Run("ended without completing", func(t *testing.T) {
		c := start(t)
		d := result(c, 1, nil, &wire.Failure{Type: "Cancelled", Message: "context canceled"})
		require.Len(t, d.WorkflowTasks, 1)
		require.Empty(t, d.ActivityTasks, "no attempt follows")
		require.Equal(t, append(base, wire.EventActivityCancelled), c.history())
		c.fire(c.now.Add(24 * time.Hour))
		require.Equal(t, wire.EventActivityCancelled, c.history()[len(c.history())-1], "no timeout or retry of it follows")
	})
	t.Run("attempt ran out of time", func(t *testing.T) {
		c := start(t)
		c.fire(c.now.Add(24 * time.Hour))
		h := c.history()
		require.Equal(t, wire.EventActivityCancelled, h[len(h)-1])
	})
	t.Run("waiting for a retry", func(t *testing.T) {
		c := newCancelShard(t, MemoryConfig{})
		c.complete(decisionSamples[wire.DecisionScheduleActivity])
		result(c, 1, nil, &wire.Failure{Type: "Busy", Message: "try later"})
		c.cancel("stop", 0)
		c.complete(wire.Decision{Type: wire.DecisionRequestCancelActivity, ActivityID: 1})
		d, err := c.m.FireDue(t.Context(), c.now.Add(time.Hour))
		require.NoError(t, err)
		require.Empty(t, d.ActivityTasks, "no attempt after it was given up")
		h := c.history()
		require.Equal(t, wire.EventActivityCancelled, h[len(h)-1])
	})
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

// TestARunTimeoutClosesTimedOut: past its run timeout a run closes
// TimedOut at once when its workflow has no cancel_grace; with one, it is
// asked to cancel (cause run_timeout), and its code's return closes it
// TimedOut, keeping its result; the grace's end closes it TimedOut if
// the code has not.
func TestARunTimeoutClosesTimedOut(t *testing.T) {
	start := func(c *cancelShard, run, execution time.Duration) {
		cmd := startCmd("timed", "", "timed-1")
		cmd.Start.RunTimeoutMS, cmd.Start.ExecutionTimeoutMS = run.Milliseconds(), execution.Milliseconds()
		d := c.apply(&cmd)
		c.exec = d.Outcomes[0].ExecutionID
		c.track(d)
		c.complete(decisionSamples[wire.DecisionStartTimer])
	}
	t.Run("no grace", func(t *testing.T) {
		c := newCancelShard(t, MemoryConfig{})
		start(c, time.Hour, 0)
		e, _, _ := c.m.Execution(c.exec)
		require.Equal(t, c.now.Add(time.Hour), *e.Timeouts.RunDeadline)
		_, err := c.m.FireDue(t.Context(), c.now.Add(time.Hour))
		require.NoError(t, err)
		e, hist, _ := c.m.Execution(c.exec)
		require.Equal(t, wire.StatusTimedOut, e.Status)
		require.Equal(t, wire.EventWorkflowTimedOut, hist[len(hist)-1].Type)
		require.JSONEq(t, `{"type":"TimedOut","message":"run_timeout of 1h0m0s passed"}`, string(e.Error))
	})
	t.Run("grace, the code closes it", func(t *testing.T) {
		c := newCancelShard(t, MemoryConfig{CancelGraceByWorkflow: map[string]time.Duration{"timed": time.Minute}})
		start(c, time.Hour, 0)
		c.now = c.now.Add(time.Hour)
		c.fire(c.now)
		e, hist, _ := c.m.Execution(c.exec)
		require.Equal(t, wire.StatusRunning, e.Status, "its code cleans up")
		require.JSONEq(t, `{"reason":"run_timeout of 1h0m0s passed","cause":"run_timeout","grace_ms":60000}`, string(hist[len(hist)-1].Attrs))
		c.complete(wire.Decision{Type: wire.DecisionTimeOutWorkflow, Result: json.RawMessage(`"released"`)})
		e, _, _ = c.m.Execution(c.exec)
		require.Equal(t, wire.StatusTimedOut, e.Status)
		require.JSONEq(t, `"released"`, string(e.Result))
	})
	t.Run("grace ends", func(t *testing.T) {
		c := newCancelShard(t, MemoryConfig{CancelGraceByWorkflow: map[string]time.Duration{"timed": time.Minute}})
		start(c, time.Hour, 0)
		_, err := c.m.FireDue(t.Context(), c.now.Add(time.Hour))
		require.NoError(t, err)
		_, err = c.m.FireDue(t.Context(), c.now.Add(time.Hour+time.Minute))
		require.NoError(t, err)
		e, hist, _ := c.m.Execution(c.exec)
		require.Equal(t, wire.StatusTimedOut, e.Status, "not Terminated: it timed out")
		require.Contains(t, string(hist[len(hist)-1].Attrs), "cancel_grace of 1m0s ended")
	})
}

// TestAnExecutionTimeoutBoundsTheChain: each run that continues as new
// gets a fresh run timeout, while the execution timeout counts from the
// chain's first run.
func TestAnExecutionTimeoutBoundsTheChain(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{TimeoutsByWorkflow: map[string]WorkflowTimeouts{"timed": {Run: 40 * time.Minute, Execution: time.Hour}}})
	cmd := startCmd("timed", "", "timed-1")
	d := c.apply(&cmd)
	c.exec = d.Outcomes[0].ExecutionID
	c.track(d)
	first, _, _ := c.m.Execution(c.exec)
	require.Equal(t, c.now.Add(time.Hour), *first.Timeouts.ExecutionDeadline, "the configured timeouts apply")
	c.now = c.now.Add(30 * time.Minute)
	c.complete(decisionSamples[wire.DecisionContinueAsNew])
	first, _, _ = c.m.Execution(c.exec)
	next, _, _ := c.m.Execution(first.ContinuedAs)
	require.Equal(t, c.now.Add(40*time.Minute), *next.Timeouts.RunDeadline, "a fresh run timeout")
	require.Equal(t, *first.Timeouts.ExecutionDeadline, *next.Timeouts.ExecutionDeadline, "the chain's deadline")
	_, err := c.m.FireDue(t.Context(), first.CreatedAt.Add(time.Hour))
	require.NoError(t, err)
	next, hist, _ := c.m.Execution(next.ExecutionID)
	require.Equal(t, wire.StatusTimedOut, next.Status)
	require.Contains(t, string(hist[len(hist)-1].Attrs), "execution_timeout of 1h0m0s passed")
}

// TestCommandsToOtherShardsFitWhatNATSCarries: a child's start or a
// workflow's signal larger than NATS carries is refused for the code to
// see (payload_too_large), never put in the outbox, which could not
// publish it; a child whose result is too large to report tells its
// parent it completed, without it.
func TestCommandsToOtherShardsFitWhatNATSCarries(t *testing.T) {
	c := newCancelShard(t, MemoryConfig{MaxTask: 4096})
	big := json.RawMessage(`"` + strings.Repeat("x", 5000) + `"`)
	d := c.complete(
		wire.Decision{Type: wire.DecisionStartChild, Child: &wire.ChildAttrs{ChildID: 1, WorkflowName: "kid", Input: big}},
		wire.Decision{Type: wire.DecisionSignalExternal, Signal: &wire.ExternalSignalAttrs{SignalID: 1, ExecutionID: c.exec, SignalName: "s", Payload: big}},
		wire.Decision{Type: wire.DecisionStartChild, Child: &wire.ChildAttrs{ChildID: 2, WorkflowName: "kid", Input: json.RawMessage(`1`)}},
	)
	require.Len(t, d.Commands, 1, "only the small child's start is sent")
	_, hist, _ := c.m.Execution(c.exec)
	var refused []string
	for _, ev := range hist {
		if ev.Type == wire.EventChildWorkflowStartFailed || ev.Type == wire.EventExternalSignalFailed {
			require.Contains(t, string(ev.Attrs), `"error":"payload_too_large"`)
			refused = append(refused, ev.Type)
		}
	}
	require.Equal(t, []string{wire.EventChildWorkflowStartFailed, wire.EventExternalSignalFailed}, refused)

	// The small child starts, and completes with a result too large to
	// carry back.
	d = c.apply(d.Commands[0])
	require.Len(t, d.Commands, 1, "its start is reported")
	c.apply(d.Commands[0])
	kid := d.Outcomes[0].ExecutionID
	d = c.apply(&wire.Command{CommandID: dedup.WorkflowTaskCommandID(kid, 1), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: kid, TaskID: 1, BaseSeq: 1,
			Decisions: []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: big}}}})
	require.Len(t, d.Commands, 1, "its close is reported")
	require.Less(t, len(d.Commands[0].Report.Child.Message), 200)
	c.apply(d.Commands[0])
	_, hist, _ = c.m.Execution(c.exec)
	last := hist[len(hist)-1]
	require.Equal(t, wire.EventChildWorkflowCompleted, last.Type)
	require.Contains(t, string(last.Attrs), `"error":"payload_too_large"`)
	require.NotContains(t, string(last.Attrs), "xxxx")
}
