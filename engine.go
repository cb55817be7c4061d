package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"time"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// How a workflow task is replayed.
//
// The history holds, for each workflow task completed, a
// WorkflowTaskCompleted event saying what the task saw (the events up to
// its base_seq) and its time, followed by the events of its decisions
// (ActivityScheduled, TimerStarted, ..., maybe among events that came
// meanwhile). Other events (a result, a signal, a timer firing) become
// visible to workflow code only at the first task that saw them. So a
// replay goes task by task: it makes visible what task k saw, runs the
// coroutines until they block, and checks that they decided what the
// history records after task k's WorkflowTaskCompleted, kind, name, input
// and options; then task k+1. Every call that reads state (Future.IsReady,
// a Selector, a signal channel, a timer, Now) sees the history only up to
// where the replay stands, as the first run did. At the end of the
// history it runs the task at hand, and what its coroutines decide is the
// task's result.
//
// A history written before WorkflowTaskCompleted existed has none: each
// run of decision events is then taken as a task that saw the history up
// to the event before it, and decisions are matched in order across
// them, as Harvest's first replayer did.

// ErrNonDeterministic is returned (wrapped) when workflow code, replayed
// over its history, makes calls that differ from those the history records.
var ErrNonDeterministic = errors.New("workflow is not deterministic")

// NonDeterminismError says where a replay diverged from its history: at
// event Seq (of workflow task TaskID), what the history had and what the
// code asked for. It matches ErrNonDeterministic (errors.Is).
type NonDeterminismError struct {
	TaskID int
	Seq    int
	// History is the recorded event, or "nothing" when the code decided
	// more than the history records.
	History string
	// Code is the decision the code took, or "nothing" when it decided
	// less.
	Code string
}

func (e *NonDeterminismError) Error() string {
	return fmt.Sprintf("%s: at history event %d (workflow task %d) the history has %s, the code asked for %s", ErrNonDeterministic, e.Seq, e.TaskID, e.History, e.Code)
}

func (e *NonDeterminismError) Is(target error) bool { return target == ErrNonDeterministic }

// errStale says a cached execution does not continue the task's history:
// the task is run on a fresh one.
var errStale = errors.New("cached execution does not continue the history")

// activityState is an activity the workflow scheduled.
type activityState struct {
	result *wire.ActivityClosedAttrs // visible result
	// tick is when its result, or its cancellation, became visible.
	tick int
	// scheduled says the code scheduled it (a result may come first, on
	// a replay); disconnected that it did so with a context cancellation
	// does not reach.
	scheduled    bool
	disconnected bool
	// cancelRequested says the code gave it up for the execution's
	// cancellation (request_cancel_activity): its Future waits for the
	// attempt in flight to end. canceled says it ended without completing
	// (ActivityCancelled), or that it was never scheduled (asked for with
	// a cancelled context): the Future fails with a canceled error.
	cancelRequested bool
	canceled        bool
}

// timerState is a timer the workflow started.
type timerState struct {
	fired     bool
	cancelled bool
	// byContext says the execution's cancellation cancelled it (a
	// Selector then takes it as ready).
	byContext bool
	// tick is when it fired, or was cancelled by the context.
	tick int
	// started says the code started it; disconnected that it did so
	// with a context cancellation does not reach.
	started      bool
	disconnected bool
	// until is when it fires, by the workflow's clock when it started.
	until time.Time
}

type signalItem struct {
	payload json.RawMessage
	tick    int
	// seq is its SignalReceived event's.
	seq int
}

type signalQueue struct {
	items    []signalItem
	consumed int
}

// execution is one execution's workflow code and what the history has
// shown it: kept in the worker's cache between workflow tasks.
type execution struct {
	fn   workflowFunc
	opts map[string]ActivityOptions
	log  *slog.Logger
	info WorkflowInfo
	d    *dispatcher

	// applied counts the history events consumed; lastSeq and lastType
	// are the last one's, to check that a task continues the history.
	applied  int
	lastSeq  int
	lastType string
	// sizes are the history's cumulated sizes, by event consumed.
	sizes []int
	// taskID is the task run last at the end of its history, and
	// awaiting its decisions, to be found after its WorkflowTaskCompleted
	// in the next task's history.
	taskID   int
	awaiting []wire.Decision
	// awaitingBase is the last event the task run last saw: its result's
	// base_seq, which its WorkflowTaskCompleted must record.
	awaitingBase int
	// expect are decisions taken at the last boundary replayed that the
	// history has not matched yet; legacy says the history has no
	// WorkflowTaskCompleted there (decisions match in order, across
	// boundaries).
	expect    []wire.Decision
	inBlock   bool
	legacy    bool
	blockTask int
	// unseen are events consumed that no task has seen yet.
	unseen []wire.Event
	// markers are the recorded markers, by id: a replay returns them.
	markers map[int]json.RawMessage
	// versions are the versions of changes the history records (or this
	// run recorded), by change id; versionsGiven those GetVersion has
	// returned, which later calls return again.
	versions      map[string]int
	versionsGiven map[string]int
	// updates are its update handlers and what it delivered (updates.go).
	updates updateState
	// states are the query states the code set (SetQueryState), by name,
	// as JSON; sentStates what the worker last returned of them, so that
	// a task's result carries only those that changed. Neither is
	// history: a replay sets states again as its code runs.
	states     map[string]json.RawMessage
	sentStates map[string]json.RawMessage
	// sentWaiting is what the worker last returned of what the code
	// waits for (api.Waiting's waits, as JSON), nil before it has.
	sentWaiting []byte

	// What workflow code sees.
	tick       int // bumped as anything becomes visible; orders Select
	activities map[int]*activityState
	timers     map[int]*timerState
	signals    map[string]*signalQueue
	now        time.Time
	replaying  bool
	seenLen    int
	seenSize   int
	// suggested is the task's ContinueAsNewSuggested: the scheduler's
	// word, carried by the task when it runs and recorded in its
	// WorkflowTaskCompleted for a replay (see WorkflowInfo).
	suggested bool

	nextActivity, nextTimer, nextMarker int
	// givingUp says the cancellation request became visible in the events
	// being made visible: what the code waits on is given up once they
	// all are (cancel.go).
	givingUp bool
	// children are the child workflows the code started, sent the
	// signals it sent to other executions, numbered as the code took
	// them (children.go).
	children map[int]*childState
	// serves says whether the worker registers a workflow on a task queue
	// (a child the code starts there is known to run); nil: unknown.
	serves                func(name, taskQueue string) bool
	sent                  map[int]*signalState
	nextChild, nextSignal int
	// decisions are those taken since the last boundary.
	decisions []wire.Decision
	// cancel is the execution's cancellation request, once visible to
	// the code (cancel.go); nil before.
	cancel *cancelState
	// returned says the workflow function returned (its complete or fail
	// decision is taken).
	returned bool
	// idle says the task run last only refused updates (runTask).
	idle bool
	// failed is a replay's divergence, or another reason the execution
	// cannot go on.
	failed error
}

func newExecution(fn workflowFunc, task *wire.WorkflowTask, opts map[string]ActivityOptions, log *slog.Logger) *execution {
	x := &execution{
		fn: fn, opts: opts, d: newDispatcher(),
		info:       WorkflowInfo{ExecutionID: task.ExecutionID, WorkflowName: task.WorkflowName, WorkflowID: task.WorkflowID, TaskQueue: task.TaskQueue, Attempt: 1},
		activities: map[int]*activityState{}, timers: map[int]*timerState{}, signals: map[string]*signalQueue{},
		children: map[int]*childState{}, sent: map[int]*signalState{},
		markers: map[int]json.RawMessage{}, versions: map[string]int{}, versionsGiven: map[string]int{},
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	x.log = slog.New(&replayHandler{x: x, h: log.Handler()}).With("execution_id", task.ExecutionID, "workflow", task.WorkflowName, "workflow_id", task.WorkflowID)
	return x
}

// continues says whether task continues the history this execution has
// consumed, so that it can run the task without replaying.
//
// A task may carry only the history's latest events
// (wire.WorkflowTask.HistoryFrom): it continues the execution when it
// carries the last event the execution consumed, the same, and what
// follows. History seqs run from 1 without gaps.
func (x *execution) continues(task *wire.WorkflowTask) bool {
	if x.failed != nil || x.returned || task.TaskID != x.taskID+1 {
		return false
	}
	if x.applied == 0 {
		return task.Whole()
	}
	i := x.lastSeq - task.FirstSeq()
	if i < 0 || i >= len(task.History) {
		return false
	}
	last := task.History[i]
	return last.Seq == x.lastSeq && last.Type == x.lastType
}

// pending are the events of task the execution has not consumed: those
// after its last one (task continues it, or is a whole history for a
// fresh execution).
func (x *execution) pending(task *wire.WorkflowTask) []wire.Event {
	i := x.lastSeq + 1 - task.FirstSeq()
	if i < 0 || i > len(task.History) {
		return nil
	}
	return task.History[i:]
}

// close ends the execution's coroutines.
func (x *execution) close() { x.d.close() }

// runTask consumes the rest of task's history, replaying the tasks it
// records, then runs task itself and returns its decisions.
func (x *execution) runTask(task *wire.WorkflowTask) ([]wire.Decision, error) {
	hist := x.pending(task)
	for _, ev := range hist {
		if ev.Type == wire.EventMarkerRecorded {
			var a wire.MarkerAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			if used, ok := x.markers[a.MarkerID]; ok && !wire.SameJSON(used, a.Value) {
				// This execution drew another value for the side effect
				// than the history recorded (it ran a task whose result was
				// superseded): it must not go on with it. A fresh replay
				// takes the recorded one.
				return nil, errStale
			}
			x.markers[a.MarkerID] = a.Value
		}
		if ev.Type == wire.EventVersionMarker {
			var a wire.VersionMarkerAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			if used, ok := x.versions[a.ChangeID]; ok && used != a.Version {
				return nil, errStale // as for a side effect's value, above
			}
			x.versions[a.ChangeID] = a.Version
		}
	}
	for _, ev := range hist {
		prevSeq := x.lastSeq
		x.applied++
		x.lastSeq, x.lastType = ev.Seq, ev.Type
		size := len(ev.Type) + len(ev.Attrs)
		if n := len(x.sizes); n > 0 {
			size += x.sizes[n-1]
		}
		x.sizes = append(x.sizes, size)
		switch {
		case ev.Type == wire.EventWorkflowTaskCompleted:
			var a wire.WorkflowTaskCompletedAttrs
			if err := json.Unmarshal(ev.Attrs, &a); err != nil {
				return nil, fmt.Errorf("history event %d: %w", ev.Seq, err)
			}
			if err := x.endBlock(ev.Seq); err != nil {
				return nil, err
			}
			if x.awaiting != nil {
				// The task this execution ran last, recorded, over the
				// history it saw: a copy of the task dispatched again with
				// more events may be the one whose result was taken.
				if a.TaskID != x.taskID || (a.BaseSeq != 0 && a.BaseSeq != x.awaitingBase) {
					return nil, errStale
				}
				x.expect, x.awaiting = x.awaiting, nil
			} else {
				x.suggested = a.ContinueAsNewSuggested
				if err := x.boundary(a.BaseSeq, a.Time, true); err != nil {
					return nil, err
				}
				// After a history without WorkflowTaskCompleted, what its
				// tasks decided beyond it comes first.
				x.expect = append(x.expect, x.takeDecisions()...)
			}
			x.inBlock, x.legacy, x.blockTask = true, false, a.TaskID
		case decide.IsDecisionEvent(ev.Type) && !decide.Imposed(ev):
			if !x.inBlock {
				if x.awaiting != nil {
					return nil, errStale
				}
				// A history from before WorkflowTaskCompleted: the task
				// saw what came before this event.
				x.suggested = false
				if err := x.boundary(prevSeq, ev.At, true); err != nil {
					return nil, err
				}
				x.expect = append(x.expect, x.takeDecisions()...)
				x.inBlock, x.legacy = true, true
			}
			if ev.Type == wire.EventWorkflowUpdateAccepted {
				// The update is delivered here again, as the task that
				// accepted it delivered it.
				if err := x.replayUpdate(ev); err != nil {
					return nil, err
				}
			}
			if err := x.match(ev); err != nil {
				return nil, err
			}
		default:
			if x.legacy {
				x.inBlock = false
			}
			x.unseen = append(x.unseen, ev)
		}
	}
	if x.awaiting != nil {
		// The task run last is not in this history: its result was not
		// taken.
		return nil, errStale
	}
	if err := x.endBlock(x.lastSeq); err != nil {
		return nil, err
	}
	leftover := x.expect
	x.expect, x.inBlock, x.legacy = nil, false, false
	if task.Time.IsZero() {
		task.Time = x.now
	}
	x.suggested = task.ContinueAsNewSuggested
	shown, steps := len(x.unseen), x.d.steps
	if err := x.boundary(x.lastSeq, task.Time, false); err != nil {
		return nil, err
	}
	shown -= len(x.unseen)
	if err := x.deliverUpdates(task); err != nil {
		return nil, err
	}
	out := append(leftover, x.takeDecisions()...)
	if len(out) == 0 {
		// None, alike whether the execution was cached or replayed.
		out = nil
	}
	x.taskID = task.TaskID
	x.awaiting = append([]wire.Decision{}, out...)
	x.awaitingBase = x.lastSeq
	// A task that only refused updates (it showed the code nothing new,
	// no coroutine moved, nothing was decided) is recorded nowhere
	// (wire.WorkflowTaskResult.Idle): the next task's history has no
	// WorkflowTaskCompleted of it to find.
	x.idle = len(out) == 0 && shown == 0 && x.d.steps == steps && len(x.updates.rejections) > 0
	if x.idle {
		x.awaiting = nil
	}
	return out, nil
}

// endBlock checks, as a task's decision events end (at seq), that the
// history recorded every decision its replay took. A history without
// WorkflowTaskCompleted carries them over to the next.
func (x *execution) endBlock(seq int) error {
	if !x.inBlock || x.legacy || len(x.expect) == 0 {
		return nil
	}
	return x.diverged(&NonDeterminismError{TaskID: x.blockTask, Seq: seq, History: "nothing more", Code: describeDecision(x.expect[0])})
}

// boundary makes visible the events a task saw (up to base), sets the
// task's time, and runs the coroutines until they block.
func (x *execution) boundary(base int, at time.Time, replaying bool) error {
	keep := x.unseen[:0]
	for _, ev := range x.unseen {
		if ev.Seq <= base {
			if err := x.see(ev); err != nil {
				return err
			}
		} else {
			keep = append(keep, ev)
		}
	}
	x.unseen = keep
	if x.givingUp {
		x.giveUp()
	}
	if !at.IsZero() && at.After(x.now) {
		x.now = at.UTC()
	}
	x.replaying = replaying
	x.seenLen = base
	if base >= 1 && base <= len(x.sizes) {
		// Events are numbered from 1 without gaps, and a task carries
		// the whole history: sizes[s-1] is the size up to seq s.
		x.seenSize = x.sizes[base-1]
	}
	x.d.run()
	if p := x.d.panicked; p != nil {
		return x.diverged(&workflowPanic{workflow: x.info.WorkflowName, failure: p})
	}
	return x.failed
}

// workflowPanic is a workflow task's failure when workflow code
// panicked: failure.Type is "panic", or the type of the error it panicked
// with (VersionUnsupported for a *VersionError).
type workflowPanic struct {
	workflow string
	failure  *wire.Failure
}

func (e *workflowPanic) Error() string {
	return fmt.Sprintf("workflow %q panicked: %s", e.workflow, e.failure.Message)
}

// taskFailure says why a workflow task failed when retrying it on the
// same code cannot help: its replay diverged, it met a version the code
// does not support, or the workflow code panicked. The worker reports it
// to the scheduler, which shows the execution as failing its task and
// dispatches it again after a backoff. For any other error, nil.
func taskFailure(err error) *workerrt.TaskFailureError {
	var nd *NonDeterminismError
	var p *workflowPanic
	switch {
	case errors.As(err, &nd):
		return &workerrt.TaskFailureError{Err: err, Failure: wire.WorkflowTaskFailure{Reason: wire.TaskFailedNondeterminism, Message: err.Error(),
			EventSeq: nd.Seq, History: nd.History, Code: nd.Code}}
	case errors.As(err, &p):
		reason := wire.TaskFailedPanic
		if p.failure.Type == (&VersionError{}).failureType() {
			reason = wire.TaskFailedVersionUnsupported
		}
		return &workerrt.TaskFailureError{Err: err, Failure: wire.WorkflowTaskFailure{Reason: reason, Message: err.Error()}}
	}
	return nil
}

func (x *execution) diverged(err error) error {
	if x.failed == nil {
		x.failed = err
	}
	return x.failed
}

// unconsumedSignals are the seqs of the signals the workflow saw and did
// not receive, in order: a run that continues as new passes them on.
func (x *execution) unconsumedSignals() []int {
	var out []int
	for _, q := range x.signals {
		for _, it := range q.items[q.consumed:] {
			out = append(out, it.seq)
		}
	}
	slices.Sort(out)
	return out
}

// see makes one event visible to workflow code.
func (x *execution) see(ev wire.Event) error {
	x.tick++
	switch ev.Type {
	case wire.EventWorkflowStarted:
		var a wire.WorkflowStartedAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err != nil {
			return fmt.Errorf("history event %d: %w", ev.Seq, err)
		}
		x.info.StartTime, x.info.ContinuedFrom = ev.At, a.ContinuedFrom
		if x.now.IsZero() {
			x.now = ev.At
		}
		ctx := &WorkflowContext{x: x}
		x.d.spawn("workflow function", func() {
			res, err := x.fn(ctx, a.Input)
			x.finish(res, err)
		})
	case wire.EventActivityCompleted, wire.EventActivityFailed:
		var a wire.ActivityClosedAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err != nil {
			return fmt.Errorf("history event %d: %w", ev.Seq, err)
		}
		// A result of an activity the code has not scheduled (yet) is
		// kept for when it does.
		st := x.activityState(a.ActivityID)
		st.result = &a
		if !st.canceled {
			// A given-up activity's future stays failed so.
			st.tick = x.tick
		}
	case wire.EventSignalReceived:
		var a wire.SignalReceivedAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err != nil {
			return fmt.Errorf("history event %d: %w", ev.Seq, err)
		}
		q := x.signalQueue(a.SignalName)
		q.items = append(q.items, signalItem{payload: a.Payload, tick: x.tick, seq: ev.Seq})
	case wire.EventTimerFired:
		var a wire.TimerAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err != nil {
			return fmt.Errorf("history event %d: %w", ev.Seq, err)
		}
		st := x.timers[a.TimerID]
		if st == nil {
			st = &timerState{}
			x.timers[a.TimerID] = st
		}
		if !st.cancelled {
			st.fired, st.tick = true, x.tick
		}
	case wire.EventActivityCancelled:
		var a wire.ActivityClosedAttrs
		if err := json.Unmarshal(ev.Attrs, &a); err != nil {
			return fmt.Errorf("history event %d: %w", ev.Seq, err)
		}
		if st := x.activityState(a.ActivityID); st.result == nil && !st.canceled {
			st.canceled, st.tick = true, x.tick
		}
	case wire.EventChildWorkflowStarted, wire.EventChildWorkflowStartFailed, wire.EventChildWorkflowCompleted, wire.EventChildWorkflowFailed,
		wire.EventChildWorkflowCancelled, wire.EventChildWorkflowTerminated, wire.EventChildWorkflowTimedOut:
		return x.seeChild(ev)
	case wire.EventExternalSignalDelivered, wire.EventExternalSignalFailed:
		return x.seeSignalOutcome(ev)
	case wire.EventWorkflowCancelRequested:
		return x.seeCancelRequest(ev)
	}
	return nil
}

// activityState is the state of the activity id, made if the history
// showed nothing of it yet.
func (x *execution) activityState(id int) *activityState {
	st := x.activities[id]
	if st == nil {
		st = &activityState{}
		x.activities[id] = st
	}
	return st
}

func (x *execution) signalQueue(name string) *signalQueue {
	q := x.signals[name]
	if q == nil {
		q = &signalQueue{}
		x.signals[name] = q
	}
	return q
}

// finish takes the decision the workflow function's return makes. Once
// the execution's cancellation is visible to the code, whatever it
// returns closes the execution Cancelled: cancel_workflow with its result,
// or with its error (continuing as new included) as the failure; one
// asked because its timeout passed closes TimedOut (time_out_workflow).
func (x *execution) finish(res any, err error) {
	x.returned, x.d.done = true, true
	var next *ContinueAsNewError
	closing := wire.DecisionCancelWorkflow
	if x.cancel != nil && wire.TimeoutCause(x.cancel.cause) {
		// Asked to cancel because its timeout passed: it closes TimedOut.
		closing = wire.DecisionTimeOutWorkflow
	}
	switch {
	case x.cancel != nil && err != nil:
		x.decide(wire.Decision{Type: closing, Failure: failureOf(err)})
	case x.cancel != nil:
		raw, merr := json.Marshal(res)
		if merr != nil {
			x.decide(wire.Decision{Type: closing, Failure: &wire.Failure{Message: fmt.Sprintf("encode workflow result: %v", merr), Type: "encoding"}})
			return
		}
		x.decide(wire.Decision{Type: closing, Result: raw})
	case errors.As(err, &next):
		x.decide(wire.Decision{Type: wire.DecisionContinueAsNew, ContinueAsNew: &wire.ContinueAsNewAttrs{
			WorkflowName: next.WorkflowName, TaskQueue: next.TaskQueue, Input: next.Input, Carry: x.unconsumedSignals()}})
	case err != nil:
		x.decide(wire.Decision{Type: wire.DecisionFailWorkflow, Failure: failureOf(err)})
	default:
		raw, merr := json.Marshal(res)
		if merr != nil {
			x.decide(wire.Decision{Type: wire.DecisionFailWorkflow, Failure: &wire.Failure{Message: fmt.Sprintf("encode workflow result: %v", merr), Type: "encoding"}})
			return
		}
		x.decide(wire.Decision{Type: wire.DecisionCompleteWorkflow, Result: raw})
	}
}

// decide takes a decision, unless the coroutines are being ended.
func (x *execution) decide(d wire.Decision) {
	if x.d.closing {
		return
	}
	if x.updates.validating {
		panic(fmt.Sprintf("harvest: an update's validator took a workflow decision (%s): a validator only reads", d.Type))
	}
	x.decisions = append(x.decisions, d)
}

func (x *execution) takeDecisions() []wire.Decision {
	out := x.decisions
	x.decisions = nil
	return out
}

// match checks a recorded decision event against the next decision the
// replay took.
func (x *execution) match(ev wire.Event) error {
	if ev.Type == wire.EventVersionMarker && !x.expectsVersion(ev) {
		// A GetVersion call the code no longer makes (it went once every
		// execution took the new path): the marker is passed over.
		return nil
	}
	if len(x.expect) == 0 {
		return x.diverged(&NonDeterminismError{TaskID: x.blockTask, Seq: ev.Seq, History: describeEvent(ev), Code: "nothing"})
	}
	d := x.expect[0]
	x.expect = x.expect[1:]
	if !decide.Matches(&d, ev) {
		return x.diverged(&NonDeterminismError{TaskID: x.blockTask, Seq: ev.Seq, History: describeEvent(ev), Code: describeDecision(d)})
	}
	return nil
}

// expectsVersion says whether the next decision the replay took records
// the version marker ev.
func (x *execution) expectsVersion(ev wire.Event) bool {
	if len(x.expect) == 0 || x.expect[0].Type != wire.DecisionRecordVersion || x.expect[0].Version == nil {
		return false
	}
	var a wire.VersionMarkerAttrs
	return json.Unmarshal(ev.Attrs, &a) == nil && a.ChangeID == x.expect[0].Version.ChangeID
}

func describeEvent(ev wire.Event) string {
	return fmt.Sprintf("%s %s", ev.Type, ev.Attrs)
}

func describeDecision(d wire.Decision) string {
	raw, _ := json.Marshal(d)
	return fmt.Sprintf("%s %s", d.Type, raw)
}

// runWorkflowTask runs task on a fresh execution of fn, which it then
// ends: a replay of the whole history, as a worker without the execution
// in its cache runs it.
func runWorkflowTask(fn workflowFunc, task *wire.WorkflowTask, opts map[string]ActivityOptions) ([]wire.Decision, error) {
	x := newExecution(fn, task, opts, nil)
	defer x.close()
	return x.runTask(task)
}
