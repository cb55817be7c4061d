package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// fireTimers applies due timers in tx: each start timer asks for its
// execution's first workflow task.
func fireTimers(ctx context.Context, tx store.Tx, env applyEnv, applied int64, timers []store.Timer) (*store.Writes, error) {
	b := newBatch(ctx, env, time.Now().UTC(), applied)
	ids := make([]string, 0, len(timers))
	for _, tm := range timers {
		ids = append(ids, tm.ExecutionID)
	}
	var err error
	if b.execs, err = store.LoadExecutions(ctx, tx, ids); err != nil {
		return nil, err
	}
	var actRefs []store.ActivityRef
	for _, tm := range timers {
		if tm.Kind == store.TimerActivityTimeout || tm.Kind == store.TimerActivityRetry || tm.Kind == store.TimerActivityHeartbeat {
			var at activityTimerAttrs
			if json.Unmarshal(tm.Attrs, &at) == nil {
				actRefs = append(actRefs, store.ActivityRef{ExecutionID: tm.ExecutionID, ActivityID: at.ActivityID})
			}
		}
	}
	if b.activities, err = store.LoadActivities(ctx, tx, actRefs); err != nil {
		return nil, err
	}
	return b.fire(ctx, txHistories(tx), env.taskQueued, timers)
}

// fire applies due timers to the executions and activities the batch
// holds.
func (b *batch) fire(ctx context.Context, histories historyLoader, taskQueued func(context.Context, *store.Execution, int) bool, timers []store.Timer) (*store.Writes, error) {
	again := map[string]wftTimerAttrs{}
	for _, tm := range timers {
		b.writes.FiredTimers = append(b.writes.FiredTimers, tm.ID)
	}
	for _, tm := range timers {
		e := b.execs[tm.ExecutionID]
		if e == nil || e.Status != wire.StatusRunning {
			continue
		}
		switch tm.Kind {
		case store.TimerStart:
			b.needWorkflowTask(e)
		case store.TimerWorkflow:
			var a wire.TimerAttrs
			if err := json.Unmarshal(tm.Attrs, &a); err != nil {
				b.logFor(tm.ExecutionID).Warn("dropping undecodable timer", "timer_id", tm.ID, "err", err)
				continue
			}
			b.appendEvent(e, wire.EventTimerFired, wire.TimerAttrs{TimerID: a.TimerID})
			b.needWorkflowTask(e)
		case store.TimerActivityTimeout, store.TimerActivityRetry, store.TimerActivityHeartbeat:
			b.activityTimer(e, tm)
		case store.TimerWorkflowTask:
			b.workflowTaskTimer(ctx, e, tm, taskQueued, again)
		case store.TimerCancelGrace:
			b.cancelGraceEnded(e)
		case store.TimerRunTimeout:
			b.timedOut(e, wire.CancelCauseRunTimeout)
		case store.TimerExecutionTimeout:
			b.timedOut(e, wire.CancelCauseExecutionTimeout)
		case store.TimerWorkflowTaskRetry:
			// A task that completed since (another event brought one on)
			// cleared the mark: nothing to retry.
			if e.TaskFailing != nil {
				b.needWorkflowTask(e)
			}
		default:
			b.logFor(tm.ExecutionID).Warn("dropping timer of unknown kind", "kind", tm.Kind, "timer_id", tm.ID)
		}
	}
	if err := b.scheduleWorkflowTasks(ctx, histories); err != nil {
		return nil, err
	}
	if err := b.redispatchWorkflowTasks(ctx, histories, again); err != nil {
		return nil, err
	}
	for id := range b.changed {
		b.writes.UpdatedExecutions = append(b.writes.UpdatedExecutions, b.execs[id])
	}
	return &b.writes, nil
}

// activityTimer handles an attempt's timeout or the end of a retry
// backoff; timers of attempts that finished since are ignored.
func (b *batch) activityTimer(e *store.Execution, tm store.Timer) {
	var at activityTimerAttrs
	if err := json.Unmarshal(tm.Attrs, &at); err != nil {
		b.logFor(tm.ExecutionID).Warn("dropping undecodable activity timer", "timer_id", tm.ID, "err", err)
		return
	}
	ref := store.ActivityRef{ExecutionID: tm.ExecutionID, ActivityID: at.ActivityID}
	a := b.activities[ref]
	if a == nil || !a.Open() {
		return
	}
	switch tm.Kind {
	case store.TimerActivityTimeout:
		if a.Attempt != at.Attempt {
			return
		}
		typ, msg := "StartToCloseTimeout", fmt.Sprintf("attempt %d did not finish within its start-to-close timeout", a.Attempt)
		if total := activityOptions(a).ScheduleToClose(); total > 0 && !b.now.Before(a.ScheduledAt.Add(total)) {
			typ, msg = "ScheduleToCloseTimeout", fmt.Sprintf("activity did not finish within its schedule-to-close timeout of %s", total)
		}
		b.attemptFailed(e, a, &wire.Failure{Type: typ, Message: msg, NonRetryable: typ == "ScheduleToCloseTimeout"})
	case store.TimerActivityHeartbeat:
		if a.Attempt != at.Attempt {
			return
		}
		hb := time.Duration(activityOptions(a).HeartbeatTimeoutMS) * time.Millisecond
		last := a.ScheduledAt
		if a.LastHeartbeatAt != nil {
			last = *a.LastHeartbeatAt
		}
		if due := last.Add(hb); b.now.Before(due) {
			// Heartbeats came in: check again when the newest one runs out.
			b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: a.ExecutionID, Kind: store.TimerActivityHeartbeat, FireAt: due, Attrs: tm.Attrs})
			return
		}
		b.attemptFailed(e, a, &wire.Failure{Type: "HeartbeatTimeout", Message: fmt.Sprintf("attempt %d sent no heartbeat for %s", a.Attempt, hb)})
	case store.TimerActivityRetry:
		if a.Attempt != at.Attempt {
			return
		}
		if a.Status == store.ActivityCancelRequested {
			// Given up while it waited to be tried again: none follows.
			b.activityCancelled(e, a, &wire.Failure{Type: "Cancelled", Message: "the workflow gave the activity up"})
			return
		}
		b.activityChanged(ref, a)
		b.dispatchAttempt(e, a)
	}
}

// workflowTaskTimer handles a workflow task's deadline. A task that
// completed since is done with. One the task stream still holds has not
// been lost (no worker took it yet, or one is running it and keeps it
// alive): it is looked at again later, the wait doubling. One the stream
// no longer holds, without a completion, was lost with its message or its
// result: it is dispatched again, under a fresh message id, marked so
// that its worker runs nothing eagerly.
func (b *batch) workflowTaskTimer(ctx context.Context, e *store.Execution, tm store.Timer, queued func(context.Context, *store.Execution, int) bool, again map[string]wftTimerAttrs) {
	var at wftTimerAttrs
	if err := json.Unmarshal(tm.Attrs, &at); err != nil {
		b.logFor(tm.ExecutionID).Warn("dropping undecodable workflow task deadline", "timer_id", tm.ID, "err", err)
		return
	}
	if !e.WFTOutstanding || e.WFTID != at.TaskID {
		return
	}
	if at.Sticky {
		b.stickyTimer(ctx, e, at, again)
		return
	}
	if queued != nil && queued(ctx, e, at.TaskID) {
		at.Checks++
		b.workflowTaskDeadline(e.ExecutionID, at, min(b.wftTimeout<<min(at.Checks, 16), maxWorkflowTaskCheck))
		return
	}
	at.Redispatch++
	at.Checks = 0
	// Dispatched again to every worker: the worker it was for lost it.
	e.StickyWorker = ""
	b.changed[e.ExecutionID] = true
	b.logFor(e.ExecutionID).Warn("workflow task not completed by its deadline and no longer in the task stream: dispatching it again",
		"task_id", at.TaskID, "redispatch", at.Redispatch)
	again[e.ExecutionID] = at
}

// redispatchWorkflowTasks dispatches again the outstanding workflow tasks
// of again, with their histories.
func (b *batch) redispatchWorkflowTasks(ctx context.Context, histories historyLoader, again map[string]wftTimerAttrs) error {
	if len(again) == 0 {
		return nil
	}
	from := make(map[string]int, len(again))
	for id := range again {
		from[id] = historyFrom(b.execs[id])
	}
	stored, err := histories(ctx, from)
	if err != nil {
		return err
	}
	for id, at := range again {
		e := b.execs[id]
		data, err := b.workflowTaskPayload(e, at.TaskID, at.Redispatch, append(stored[id], b.newEvents[id]...))
		if err != nil {
			return err
		}
		b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
			Shard: b.shard, Subject: workflowTaskSubject(e),
			MsgID: workflowTaskMsgID(id, at.TaskID, at.Redispatch), Payload: data, Trace: b.traceOf(e),
		})
		b.workflowTaskDeadline(id, at, b.wftTimeout)
	}
	return nil
}
