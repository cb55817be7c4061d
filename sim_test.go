package harvest

import (
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/wire"
)

// sim is a scheduler in miniature for the SDK's tests: it keeps one
// execution's history as the scheduler writes it (each task's
// WorkflowTaskCompleted, then its decisions' events) and runs each
// workflow task twice, on a fresh execution (a replay of the whole
// history) and on one kept between tasks (a worker's cache), checking
// that both decide the same.
type sim struct {
	t      testing.TB
	fn     workflowFunc
	opts   map[string]ActivityOptions
	hist   []wire.Event
	taskID int
	now    time.Time
	cache  *workflowCache
	// suggest is the next task's ContinueAsNewSuggested, as the
	// scheduler dispatches it and records it.
	suggest bool
	// cached says the last task ran on the execution the cache kept,
	// rather than on a replay.
	cached bool
}

func newSim(t testing.TB, fn workflowFunc, input any) *sim {
	t.Helper()
	s := &sim{t: t, fn: fn, now: time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC), cache: newWorkflowCache(1, nil)}
	t.Cleanup(s.cache.close)
	raw, err := json.Marshal(input)
	require.NoError(t, err)
	s.add(wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{WorkflowName: "wf", WorkflowID: "wf-1", Input: raw})
	return s
}

// add appends an event as the scheduler does, and returns its seq.
func (s *sim) add(typ string, attrs any) int {
	s.t.Helper()
	raw, err := json.Marshal(attrs)
	require.NoError(s.t, err)
	seq := len(s.hist) + 1
	s.hist = append(s.hist, wire.Event{Seq: seq, Type: typ, At: s.now, Attrs: raw})
	return seq
}

func (s *sim) advance(d time.Duration) { s.now = s.now.Add(d) }

// complete, fail, signal and fire add what happens outside the workflow.
func (s *sim) complete(id int, result any) {
	s.t.Helper()
	raw, err := json.Marshal(result)
	require.NoError(s.t, err)
	s.add(wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: id, ActivityName: s.activityName(id), Attempt: 1, Result: raw})
}

func (s *sim) fail(id int, f wire.Failure) {
	s.add(wire.EventActivityFailed, wire.ActivityClosedAttrs{ActivityID: id, ActivityName: s.activityName(id), Attempt: 1, Failure: &f})
}

func (s *sim) signal(name string, payload any) {
	s.t.Helper()
	raw, err := json.Marshal(payload)
	require.NoError(s.t, err)
	s.add(wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: name, Payload: raw})
}

func (s *sim) fire(timerID int) { s.add(wire.EventTimerFired, wire.TimerAttrs{TimerID: timerID}) }

// cancel records the execution's cancellation request, as POST
// .../cancel makes the scheduler do.
func (s *sim) cancel(reason string) {
	s.add(wire.EventWorkflowCancelRequested, wire.WorkflowCancelRequestedAttrs{Reason: reason, Cause: wire.CancelCauseRequest})
}

// cancelled records that the activity id, given up, ended without
// completing (ActivityCancelled), as the scheduler records it once its
// attempt in flight ends.
func (s *sim) activityCancelled(id int) {
	s.add(wire.EventActivityCancelled, wire.ActivityClosedAttrs{ActivityID: id, ActivityName: s.activityName(id), Attempt: 1,
		Failure: &wire.Failure{Type: "Cancelled", Message: "given up"}})
}

func (s *sim) activityName(id int) string {
	for _, ev := range s.hist {
		var a wire.ActivityScheduledAttrs
		if ev.Type == wire.EventActivityScheduled && json.Unmarshal(ev.Attrs, &a) == nil && a.ActivityID == id {
			return a.ActivityName
		}
	}
	s.t.Fatalf("sim: activity %d was not scheduled", id)
	return ""
}

// task runs the next workflow task and records its decisions; during, if
// given, adds events that arrive while the task runs (before its
// result is applied, so the task does not see them).
func (s *sim) task(during ...func()) []wire.Decision {
	s.t.Helper()
	d, err := s.tryTask(during...)
	require.NoError(s.t, err)
	return d
}

// tryTask is task that returns the replay's error (and records nothing
// then).
func (s *sim) tryTask(during ...func()) ([]wire.Decision, error) {
	s.t.Helper()
	s.taskID++
	task := func() *wire.WorkflowTask {
		return &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", TaskQueue: "default",
			TaskID: s.taskID, History: slices.Clone(s.hist), Time: s.now, ContinueAsNewSuggested: s.suggest}
	}
	fresh, ferr := runWorkflowTask(s.fn, task(), s.opts)
	ran, cerr := s.cache.run(s.fn, task(), s.opts)
	cached := ran.Decisions
	s.cached = ran.Cached
	require.Equal(s.t, ferr != nil, cerr != nil, "a replay and a cached execution fail alike: %v / %v", ferr, cerr)
	if ferr != nil {
		return nil, ferr
	}
	require.Equal(s.t, fresh, cached, "a replay decides what a cached execution does")
	base := len(s.hist)
	for _, f := range during {
		f()
	}
	s.record(base, fresh)
	return fresh, nil
}

// record writes a task's result as the scheduler does.
func (s *sim) record(base int, decisions []wire.Decision) {
	s.add(wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: s.taskID, BaseSeq: base, Time: s.now, ContinueAsNewSuggested: s.suggest})
	for i := range decisions {
		rec, err := decide.Record(decide.KeysOf("exec-1", nil), &decisions[i], s.now)
		if err != nil {
			s.t.Fatalf("sim: %v", err)
		}
		s.add(rec.Event, rec.Attrs)
	}
}

// replay runs the whole history on a fresh execution of fn as a task
// after the last one, and returns what it decides.
func (s *sim) replay(fn workflowFunc) ([]wire.Decision, error) {
	return runWorkflowTask(fn, &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1",
		TaskID: s.taskID + 1, History: slices.Clone(s.hist), Time: s.now}, s.opts)
}

// result is the workflow's result, once it completed.
func (s *sim) result() json.RawMessage {
	s.t.Helper()
	last := s.hist[len(s.hist)-1]
	require.Equal(s.t, wire.EventWorkflowCompleted, last.Type, "the workflow completed")
	var a wire.WorkflowClosedAttrs
	require.NoError(s.t, json.Unmarshal(last.Attrs, &a))
	return a.Result
}

// cancelled is the close of a workflow cancelled (cancel_workflow).
func (s *sim) cancelled() wire.WorkflowClosedAttrs {
	s.t.Helper()
	last := s.hist[len(s.hist)-1]
	require.Equal(s.t, wire.EventWorkflowCancelled, last.Type, "the workflow closed cancelled")
	var a wire.WorkflowClosedAttrs
	require.NoError(s.t, json.Unmarshal(last.Attrs, &a))
	return a
}

// kinds are decisions' types.
func kinds(ds []wire.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		out[i] = d.Type
		if d.Type == wire.DecisionScheduleActivity {
			out[i] += " " + d.ActivityName
		}
	}
	return out
}
