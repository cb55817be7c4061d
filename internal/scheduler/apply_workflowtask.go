package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) workflowTaskCompleted(r *wire.WorkflowTaskResult) {
	e := b.execs[r.ExecutionID]
	if e == nil || e.Status != wire.StatusRunning || !e.WFTOutstanding || e.WFTID != r.TaskID {
		if b.debug {
			b.logFor(r.ExecutionID).Debug("dropping stale workflow task result", "task_id", r.TaskID)
		}
		return
	}
	if !validUpdates(e, r) {
		// Not what the task it answers could decide: a worker's fault.
		// The task goes again at its deadline.
		b.logFor(r.ExecutionID).Warn("dropping a workflow task result whose updates the execution does not have in flight", "task_id", r.TaskID)
		return
	}
	if msg := b.badSearchAttributes(e, r); msg != "" {
		// Code that sets what its workflow does not declare: the task
		// fails here, as a replay that diverges fails on its worker, and
		// goes again after a backoff; code (or a configuration) that
		// declares it, once deployed, completes it.
		b.workflowTaskFailed(&wire.WorkflowTaskFailure{ExecutionID: e.ExecutionID, TaskID: r.TaskID, BuildID: r.BuildID,
			Reason: wire.TaskFailedSearchAttributes, Message: msg})
		return
	}
	e.WFTOutstanding = false
	e.TaskFailing = nil // the code runs again
	if r.BaseSeq > 0 && r.BaseSeq <= e.LastSeq {
		// Its worker saw the history up to there: the next task carries
		// what follows.
		e.HistoryBase = r.BaseSeq
	}
	// The worker that keeps the execution in its cache takes its next
	// task first (sticky.go).
	e.StickyWorker = ""
	if validUUID(r.Sticky) {
		e.StickyWorker = r.Sticky
	}
	if e.Versioning == wire.VersioningPinned && e.PinnedBuild == "" && dedup.ValidateBuildID(r.BuildID) == nil {
		// A pinned execution stays on the build that ran its first task.
		e.PinnedBuild = r.BuildID
	}
	b.changed[e.ExecutionID] = true
	b.writes.WorkflowTasksDone = append(b.writes.WorkflowTasksDone, store.WorkflowTaskRef{ExecutionID: e.ExecutionID, TaskID: r.TaskID})
	eager := b.eagerAttempts(r)
	// The worker's speculative next task holds only when the history it
	// ran over is the execution's: nothing (a signal, a timer, a
	// cancellation) was added since this task, and every eager attempt
	// completed.
	speculate := r.Next != nil && len(eager) > 0 && len(eager) == len(r.Eager) && r.BaseSeq == e.LastSeq && !e.WFTDirty
	for _, res := range eager {
		if res.Failure != nil {
			speculate = false
		}
	}
	// What the task saw and its time come first, then its decisions: a
	// replay gives the workflow code the history as the task saw it.
	taskTime := r.Time
	if taskTime.IsZero() {
		taskTime = b.now // a worker that does not say
	}
	// The updates the task refused are answered first: refused, they
	// have no part in what the task decided.
	for i := range r.Rejections {
		b.rejectUpdate(e, &r.Rejections[i])
	}
	recorded := !r.Idle || len(r.Decisions) > 0 || len(r.Eager) > 0
	if recorded {
		typ, attrs := decide.TaskCompleted(r.TaskID, r.BaseSeq, taskTime, storableText(r.BuildID))
		attrs.ContinueAsNewSuggested = r.ContinueAsNewSuggested // what its code read (checkHistories)
		b.appendEvent(e, typ, attrs)
	}
	// An idle task (it only refused updates: nothing new was visible to
	// its code, and it decided nothing) leaves no trace in the history.
	// Its states, if any, are those a replay sent again: the seq they get
	// is not greater than the one they have, so they change nothing.
	b.setStates(e, r.States)
	b.setWaiting(e, r.Waiting, recorded)
	for i := range r.Decisions {
		if e.Status != wire.StatusRunning {
			break
		}
		d := &r.Decisions[i]
		rec, err := decide.Record(decide.KeysOf(e.ExecutionID, e.ResetKeys()), d, b.now)
		if err != nil {
			b.logFor(e.ExecutionID).Warn("ignoring a decision", "decision", d.Type, "err", err)
			continue
		}
		// What the decision means is decide's; here are the rows it needs.
		switch {
		case rec.Closes && rec.Status == wire.StatusContinuedAsNew:
			b.continueAsNew(e, d, r.BaseSeq)
			continue
		case rec.Closes && rec.Status == wire.StatusCancelled && e.CancelRequest == nil,
			rec.Closes && rec.Status == wire.StatusTimedOut && (e.CancelRequest == nil || !wire.TimeoutCause(e.CancelRequest.Cause)):
			// Only a run asked to cancel (because it timed out) closes
			// so: a worker's fault.
			b.logFor(e.ExecutionID).Warn("ignoring a decision that closes an execution not asked to", "decision", d.Type)
			continue
		case rec.Closes:
			switch {
			case rec.Status == wire.StatusCompleted:
				e.Result = d.Result
			case rec.Status == wire.StatusCancelled || rec.Status == wire.StatusTimedOut:
				// The code's return after it was told: its result, or
				// its error, is kept; the execution's error says it was
				// cancelled (or timed out).
				e.Result = d.Result
				f := wire.Failure{Type: "Cancelled", Message: e.CancelRequest.Reason}
				if rec.Status == wire.StatusTimedOut {
					f.Type = "TimedOut"
				}
				if d.Failure != nil {
					f.Message = d.Failure.Message
				}
				e.Error, _ = json.Marshal(f)
			default:
				e.Error, _ = json.Marshal(d.Failure)
			}
			b.close(e, rec.Status, rec.Event, rec.Attrs.(wire.WorkflowClosedAttrs))
			continue
		case rec.Activity != nil:
			b.scheduleActivity(e, d, rec, eager[d.ActivityID] != nil)
			continue
		case d.Type == wire.DecisionStartChild:
			b.startChild(e, rec, d.Child.Served)
			continue
		case d.Type == wire.DecisionSignalExternal:
			b.appendEvent(e, rec.Event, rec.Attrs)
			s := rec.Attrs.(wire.ExternalSignalAttrs)
			b.signalExternal(e, &s)
			continue
		case d.Type == wire.DecisionStartTimer:
			attrs, _ := json.Marshal(wire.TimerAttrs{TimerID: d.TimerID})
			b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerWorkflow, FireAt: rec.FireAt, Attrs: attrs})
		case d.Type == wire.DecisionCancelTimer:
			// A timer that fired already has no row left; its TimerFired,
			// recorded after what the task saw, is not seen by the
			// workflow.
			b.writes.CancelledTimers = append(b.writes.CancelledTimers, store.WorkflowTimerRef{ExecutionID: e.ExecutionID, TimerID: d.TimerID})
		case d.Type == wire.DecisionAcceptUpdate:
			b.acceptUpdate(e, d)
		case d.Type == wire.DecisionCompleteUpdate:
			b.completeUpdate(e, d)
		case d.Type == wire.DecisionRequestCancelActivity:
			// Its request first: a close it causes at once follows it.
			b.appendEvent(e, rec.Event, rec.Attrs)
			b.cancelActivity(e, d.ActivityID)
			continue
		case d.Type == wire.DecisionRequestCancelChild:
			b.requestCancelChild(e, d.Child.ChildID)
		case d.Type == wire.DecisionUpsertSearchAttributes:
			b.setSearchAttributes(e, d.SearchAttributes)
		}
		b.appendEvent(e, rec.Event, rec.Attrs)
	}
	// The eager attempts' results follow the decisions, in the worker's
	// order, as they do in the history its next task ran over.
	for i := range r.Eager {
		res := &r.Eager[i]
		if eager[res.ActivityID] != res || e.Status != wire.StatusRunning {
			continue
		}
		ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: res.ActivityID}
		a := b.activities[ref]
		if res.Failure != nil {
			b.attemptFailedAt(e, a, res.Failure, res.StartedAt, res.EndedAt)
			continue
		}
		a.Status = store.ActivityCompleted
		typ, attrs := decide.ActivityCompleted(a.ActivityID, a.ActivityName, 1, res.Result)
		attrs.StartedAt, attrs.EndedAt = res.StartedAt, res.EndedAt
		b.appendEvent(e, typ, attrs)
		if !speculate {
			b.needWorkflowTask(e)
		}
	}
	if speculate && e.Status == wire.StatusRunning {
		if n := r.Next; n.ExecutionID != e.ExecutionID || n.TaskID != e.WFTID+1 || n.BaseSeq != e.LastSeq {
			// Not the task the scheduler would dispatch now: dispatch it.
			b.logFor(e.ExecutionID).Warn("dropping speculative workflow task that does not follow its history", "task_id", n.TaskID, "base_seq", n.BaseSeq)
			b.needWorkflowTask(e)
			return
		}
		// The next task is the one the worker already ran: take its
		// decisions as if it had been dispatched.
		e.WFTID++
		e.WFTOutstanding = true
		b.workflowTaskCompleted(r.Next)
		return
	}
	if e.Status == wire.StatusRunning && e.WFTDirty {
		e.WFTDirty = false
		b.needWorkflowTask(e)
	}
}

// setStates records the query states a workflow task set
// (harvest.SetQueryState) at the seq of its WorkflowTaskCompleted, e's
// last event: a projection beside the history, never part of it, so a
// replay has nothing to match. A state the SDK would have refused (a
// name that is no name, a value too large or that PostgreSQL cannot
// store) is dropped, so that what a worker sends cannot fail the batch.
func (b *batch) setStates(e *store.Execution, states []wire.StateValue) {
	for _, st := range states {
		if err := validState(st); err != nil {
			b.logFor(e.ExecutionID).Warn("dropping a query state a worker sent", "err", err)
			continue
		}
		b.writes.States = append(b.writes.States, store.StateRow{ExecutionID: e.ExecutionID, Name: st.Name, Value: st.Value,
			Seq: e.LastSeq, UpdatedAt: b.now})
	}
}

// setWaiting keeps on e what its workflow code waits for, as the task
// whose WorkflowTaskCompleted is e's last event (recorded says the task
// has one) left it. nil says the waits did not change: the worker ran
// the task before this one too, and sent them then (its cache continues
// an execution only from the task it ran last), so they hold as of this
// task. Like a state, it is a projection beside the history: one a
// worker should not have sent (too many waits, too large, text
// PostgreSQL cannot store) is dropped, and e keeps none, so that what a
// worker sends cannot fail the batch.
func (b *batch) setWaiting(e *store.Execution, w *api.Waiting, recorded bool) {
	if e.Status != wire.StatusRunning {
		return
	}
	if w == nil {
		if e.Waiting != nil && recorded {
			e.Waiting = &api.Waiting{Seq: e.LastSeq, Waits: e.Waiting.Waits}
		}
		return
	}
	if err := validWaiting(w); err != nil {
		b.logFor(e.ExecutionID).Warn("dropping what a worker said its workflow code waits for", "err", err)
		e.Waiting = nil
		return
	}
	e.Waiting = &api.Waiting{Seq: e.LastSeq, Waits: w.Waits}
}

// scheduleActivity records the activity rec schedules and dispatches its
// first attempt, unless it ran eagerly (ranEagerly: its result follows)
// or may have (d.PossiblyStarted).
func (b *batch) scheduleActivity(e *store.Execution, d *wire.Decision, rec decide.Recorded, ranEagerly bool) {
	act := rec.Activity
	rawOpts, _ := json.Marshal(act.Options)
	ref := store.ActivityRef{ExecutionID: e.ExecutionID, ActivityID: act.ID}
	a := &store.Activity{
		ExecutionID: e.ExecutionID, ActivityID: act.ID, ActivityName: act.Name,
		Status: store.ActivityScheduled, Attempt: 1, IdempotencyKey: act.Key,
		Input: act.Input, Options: rawOpts, ScheduledAt: b.now,
	}
	b.activities[ref] = a
	b.newActs[ref] = true
	b.writes.NewActivities = append(b.writes.NewActivities, a)
	b.appendEvent(e, rec.Event, rec.Attrs)
	switch {
	case ranEagerly:
		// Its attempt 1 ran on the worker; the result follows.
	case d.PossiblyStarted:
		// Attempt 1 may have run on a worker that vanished: it counts, as
		// an attempt whose worker vanished does, and the next one
		// reconciles first. An activity allowed one attempt is thus never
		// run twice.
		b.attemptFailed(e, a, &wire.Failure{Type: "WorkerLost", Message: "attempt 1 may have run eagerly on a worker that vanished before reporting it"})
	default:
		b.dispatchAttempt(e, a)
	}
}

// workflowTaskFailed marks e as failing its workflow task, with why, and
// dispatches the task again after a backoff that doubles with each
// failure in a row (taskRetryBackoff): code that replays, once deployed,
// runs it. The execution is not failed; a failure of a task that is no
// longer outstanding (a late or repeated report) changes nothing.
func (b *batch) workflowTaskFailed(f *wire.WorkflowTaskFailure) {
	e := b.execs[f.ExecutionID]
	if e == nil || e.Status != wire.StatusRunning || !e.WFTOutstanding || e.WFTID != f.TaskID {
		if b.debug {
			b.logFor(f.ExecutionID).Debug("dropping stale workflow task failure", "task_id", f.TaskID)
		}
		return
	}
	e.WFTOutstanding = false
	b.changed[e.ExecutionID] = true
	b.writes.WorkflowTasksDone = append(b.writes.WorkflowTasksDone, store.WorkflowTaskRef{ExecutionID: e.ExecutionID, TaskID: f.TaskID})
	attempts, since := 1, b.now
	if prev := e.TaskFailing; prev != nil {
		attempts, since = prev.Attempts+1, prev.Since
	}
	next := b.now.Add(taskRetryBackoff(attempts))
	// The texts are a worker's: what PostgreSQL cannot store in jsonb (a
	// NUL, bytes that are not UTF-8) is replaced, so that the report is
	// recorded rather than set aside.
	e.TaskFailing = &api.TaskFailing{Reason: storableText(f.Reason), Message: storableText(f.Message), EventSeq: f.EventSeq,
		History: storableText(f.History), Code: storableText(f.Code), BuildID: storableText(f.BuildID), TaskID: f.TaskID,
		Attempts: attempts, Since: since, NextAttemptAt: next}
	b.logFor(e.ExecutionID).Warn("workflow task failed on its worker; dispatching it again after a backoff",
		"task_id", f.TaskID, "reason", f.Reason, "attempts", attempts, "retry_at", next, "build_id", f.BuildID, "err", f.Message)
	if e.WFTDirty {
		// Something happened meanwhile: the next task sees it at once.
		e.WFTDirty = false
		b.needWorkflowTask(e)
		return
	}
	b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerWorkflowTaskRetry, FireAt: next,
		Attrs: json.RawMessage(`{}`)})
}

// storableText is s with what jsonb cannot hold (NUL, invalid UTF-8)
// replaced by U+FFFD.
func storableText(s string) string {
	return strings.ReplaceAll(strings.ToValidUTF8(s, "\uFFFD"), "\x00", "\uFFFD")
}

// taskRetryBackoff is how long a workflow task that failed attempts times
// in a row waits before it is dispatched again: 1 s, doubling, at most
// 5 minutes.
func taskRetryBackoff(attempts int) time.Duration {
	d := time.Second
	for i := 1; i < attempts && d < 5*time.Minute; i++ {
		d *= 2
	}
	return min(d, 5*time.Minute)
}

// eagerAttempts returns r's eager attempts by activity id, keeping only
// attempt 1 of activities r's own decisions schedule, once each.
func (b *batch) eagerAttempts(r *wire.WorkflowTaskResult) map[int]*wire.ActivityResult {
	if len(r.Eager) == 0 {
		return nil
	}
	scheduled := map[int]bool{}
	for _, d := range r.Decisions {
		if d.Type == wire.DecisionScheduleActivity {
			scheduled[d.ActivityID] = true
		}
	}
	out := make(map[int]*wire.ActivityResult, len(r.Eager))
	for i := range r.Eager {
		res := &r.Eager[i]
		if !scheduled[res.ActivityID] || res.Attempt != 1 || out[res.ActivityID] != nil {
			b.logFor(r.ExecutionID, logattr.ActivityAttempt("", res.ActivityID, res.Attempt)...).Warn("ignoring eager attempt its task did not schedule")
			continue
		}
		out[res.ActivityID] = res
	}
	return out
}

// needWorkflowTask asks for a workflow task for e: at the end of the batch
// if none is outstanding, else as soon as the outstanding one completes.
func (b *batch) needWorkflowTask(e *store.Execution) {
	if e.Status == wire.StatusPending {
		// It waits for a concurrency slot: its first task goes when it
		// begins, with what its history holds by then.
		return
	}
	if e.WFTOutstanding {
		e.WFTDirty = true
		b.changed[e.ExecutionID] = true
		return
	}
	if !b.needTaskSet[e.ExecutionID] {
		b.needTaskSet[e.ExecutionID] = true
		b.needTask = append(b.needTask, e.ExecutionID)
	}
}

// scheduleWorkflowTasks puts one workflow task per execution that needs one
// into the outbox, carrying the execution's whole history.
func (b *batch) scheduleWorkflowTasks(ctx context.Context, histories historyLoader) error {
	b.checkHistories() // every batch ends here, once its events are appended
	load := map[string]int{}
	for _, id := range b.needTask {
		if e := b.execs[id]; !b.newExecs[id] && e.Status == wire.StatusRunning {
			load[id] = historyFrom(e)
		}
	}
	stored, err := histories(ctx, load)
	if err != nil {
		return err
	}
	for _, id := range b.needTask {
		e := b.execs[id]
		if e.Status != wire.StatusRunning || e.WFTOutstanding {
			continue
		}
		e.WFTID++
		e.WFTOutstanding = true
		e.WFTDirty = false
		b.changed[id] = true
		data, err := b.workflowTaskPayload(e, e.WFTID, 0, append(stored[id], b.newEvents[id]...))
		if err != nil {
			return err
		}
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: workflowTaskSubject(e),
			MsgID: workflowTaskMsgID(id, e.WFTID, 0), Payload: data, Trace: b.traceOf(e),
		})
		if e.StickyWorker != "" {
			b.workflowTaskDeadline(id, wftTimerAttrs{TaskID: e.WFTID, Sticky: true}, stickyTimeout)
		} else {
			b.workflowTaskDeadline(id, wftTimerAttrs{TaskID: e.WFTID}, b.wftTimeout)
		}
	}
	return nil
}

// historyFrom is the first history event e's next workflow task
// carries: the last one the worker of its last completed task had seen
// (so that a worker holding the execution in its cache checks that the
// task continues it), or the first. A worker that does not hold the
// execution fetches the events before it (wire.HistoryPageRequest).
func historyFrom(e *store.Execution) int {
	return max(1, e.HistoryBase)
}

// workflowTaskPayload encodes e's workflow task taskID, dispatched again
// redispatch times, carrying events: its history from historyFrom(e) on.
// When that is more than NATS carries, the task carries no events and
// its worker fetches them all: a task is never too large to publish,
// however long its history.
func (b *batch) workflowTaskPayload(e *store.Execution, taskID, redispatch int, events []wire.Event) ([]byte, error) {
	task := wire.WorkflowTask{
		ExecutionID: e.ExecutionID, Shard: b.shard, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID,
		TaskQueue: e.TaskQueue, TaskID: taskID, History: events, Redispatch: redispatch, Time: b.now,
		ContinueAsNewSuggested: b.limits.suggestsContinueAsNew(e), ResetKeys: e.ResetKeys(),
	}
	for _, f := range e.Updates.Requested() {
		task.Updates = append(task.Updates, wire.UpdateRequest{UpdateID: f.UpdateID, Name: f.Name, Args: f.Args})
	}
	if len(events) > 0 && events[0].Seq > 1 {
		task.HistoryFrom = events[0].Seq
	}
	data, err := json.Marshal(task)
	if err != nil {
		return nil, fmt.Errorf("encode workflow task of %s: %w", e.ExecutionID, err)
	}
	if b.maxTask <= 0 || len(data) <= b.maxTask {
		return data, nil
	}
	if b.debug {
		b.logFor(e.ExecutionID).Debug("a workflow task's events are more than NATS carries: its worker fetches them", "bytes", len(data), "limit", b.maxTask)
	}
	task.History, task.HistoryFrom = nil, e.LastSeq+1
	if data, err = json.Marshal(task); err != nil {
		return nil, fmt.Errorf("encode workflow task of %s: %w", e.ExecutionID, err)
	}
	return data, nil
}

// DefaultWorkflowTaskTimeout is how long a dispatched workflow task may go
// without completing before the scheduler looks for it (Config).
const DefaultWorkflowTaskTimeout = 10 * time.Second

// maxWorkflowTaskCheck caps the wait between two looks at a workflow task
// the task stream still holds.
const maxWorkflowTaskCheck = 5 * time.Minute

// wftTimerAttrs are the attributes of a workflow task's deadline.
type wftTimerAttrs struct {
	TaskID int `json:"task_id"`
	// Redispatch counts the task's dispatches after its deadline; Checks
	// the looks that found it still queued, which space the next look.
	Redispatch int `json:"redispatch,omitempty"`
	Checks     int `json:"checks,omitempty"`
	// Sticky says the task went to the worker that holds its execution
	// (sticky.go): its deadline is stickyTimeout's.
	Sticky bool `json:"sticky,omitempty"`
}

// workflowTaskMsgID is the Nats-Msg-Id of a workflow task: a task
// dispatched again gets a fresh one, so the broker's duplicate window does
// not drop it.
func workflowTaskMsgID(executionID string, taskID, redispatch int) string {
	if redispatch == 0 {
		return fmt.Sprintf("wft:%s:%d", executionID, taskID)
	}
	return fmt.Sprintf("wft:%s:%d:r%d", executionID, taskID, redispatch)
}

// parseWorkflowTaskMsgID is workflowTaskMsgID's inverse; ok is false for
// other message ids.
func parseWorkflowTaskMsgID(msgID string) (executionID string, taskID int, ok bool) {
	rest, found := strings.CutPrefix(msgID, "wft:")
	if !found || len(rest) < 38 || rest[36] != ':' {
		return "", 0, false
	}
	executionID, rest = rest[:36], rest[37:]
	if i := strings.IndexByte(rest, ':'); i >= 0 {
		rest = rest[:i]
	}
	n, err := strconv.Atoi(rest)
	if err != nil {
		return "", 0, false
	}
	return executionID, n, true
}

func (b *batch) workflowTaskDeadline(executionID string, at wftTimerAttrs, after time.Duration) {
	attrs, _ := json.Marshal(at)
	b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: executionID, Kind: store.TimerWorkflowTask, FireAt: b.now.Add(after), Attrs: attrs})
}

// workflowTaskSubject is the subject of e's workflow tasks: its build's
// when it is pinned to one, else the one every build that registers its
// workflow on its task queue shares (docs/versioning.md#pinned-workflows)
// at e's priority. Sticky and pinned tasks go to lanes of their own,
// which have no priority levels (docs/start-policies.md#priorities).
func workflowTaskSubject(e *store.Execution) string {
	if e.StickyWorker != "" {
		return broker.StickyTaskSubject(e.TaskQueue, e.WorkflowName, e.StickyWorker)
	}
	if e.PinnedBuild != "" {
		return broker.PinnedTaskSubject(e.TaskQueue, e.WorkflowName, e.PinnedBuild)
	}
	return broker.PriorityTaskSubject(e.TaskQueue, wire.TaskWorkflow, e.WorkflowName, validPriority(e.Priority))
}
