package scheduler

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func (b *batch) activityResult(r *wire.ActivityResult) {
	ref := store.ActivityRef{ExecutionID: r.ExecutionID, ActivityID: r.ActivityID}
	a, e := b.activities[ref], b.execs[r.ExecutionID]
	if a == nil || e == nil || !a.Open() || a.Attempt != r.Attempt || e.Status != wire.StatusRunning {
		if b.debug {
			name := ""
			if a != nil {
				name = a.ActivityName
			}
			b.logFor(r.ExecutionID, logattr.ActivityAttempt(name, r.ActivityID, r.Attempt)...).Debug("dropping stale activity result")
		}
		return
	}
	if r.Failure != nil {
		b.attemptFailedAt(e, a, r.Failure, r.StartedAt, r.EndedAt)
		return
	}
	a.Status = store.ActivityCompleted
	b.activityChanged(ref, a)
	b.writes.ActivityDone = append(b.writes.ActivityDone, ref)
	b.appendEvent(e, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: r.Attempt, Result: r.Result,
		StartedAt: r.StartedAt, EndedAt: r.EndedAt})
	b.needWorkflowTask(e)
}

// heartbeat records that the current attempt is alive, with its details.
func (b *batch) heartbeat(h *wire.ActivityHeartbeat) {
	ref := store.ActivityRef{ExecutionID: h.ExecutionID, ActivityID: h.ActivityID}
	a := b.activities[ref]
	if a == nil || !a.Open() || a.Attempt != h.Attempt {
		return
	}
	now := b.now
	a.LastHeartbeatAt = &now
	if len(h.Details) > 0 {
		a.HeartbeatDetails = h.Details
	}
	b.activityChanged(ref, a)
}

func (b *batch) activityChanged(ref store.ActivityRef, a *store.Activity) {
	if !b.newActs[ref] {
		b.writes.UpdatedActivities = append(b.writes.UpdatedActivities, a)
	}
}

func activityOptions(a *store.Activity) wire.ActivityOptions {
	opts := wire.ActivityOptions{Retry: wire.DefaultRetryPolicy()}
	if len(a.Options) > 0 {
		_ = json.Unmarshal(a.Options, &opts)
	}
	return opts
}

// attemptFailed decides what follows a failed attempt: the next attempt
// after the policy's backoff, on a durable timer, or the activity's
// failure, which the workflow sees.
func (b *batch) attemptFailed(e *store.Execution, a *store.Activity, f *wire.Failure) {
	b.attemptFailedAt(e, a, f, time.Time{}, time.Time{})
}

// attemptFailedAt is attemptFailed for an attempt whose worker said when
// its code began and returned (zero: it did not say), which the
// activity's failure, if it is its last, records.
func (b *batch) attemptFailedAt(e *store.Execution, a *store.Activity, f *wire.Failure, startedAt, endedAt time.Time) {
	ref := store.ActivityRef{ExecutionID: a.ExecutionID, ActivityID: a.ActivityID}
	if a.Status == store.ActivityCancelRequested {
		// The workflow gave it up: the attempt in flight ended without
		// completing, and none follows.
		b.activityCancelled(e, a, f)
		return
	}
	opts := activityOptions(a)
	delay := opts.Retry.Delay(a.Attempt)
	retry := opts.Retry.Retries(a.Attempt, f.Type, f.NonRetryable)
	if total := opts.ScheduleToClose(); total > 0 && b.now.Add(delay).After(a.ScheduledAt.Add(total)) {
		retry = false
		if f.Type == "StartToCloseTimeout" {
			// The attempt ran out of time and the activity has none left
			// for another: whichever side noticed first (the worker at its
			// deadline, or the timer), the bound that ended it is the
			// schedule-to-close one.
			f = &wire.Failure{Type: "ScheduleToCloseTimeout", Message: fmt.Sprintf("activity did not finish within its schedule-to-close timeout of %s", total), NonRetryable: true}
		}
	}
	if retry {
		// An attempt that ended without a result may have had its effect:
		// the next one reconciles first.
		a.OutcomeUnknown = outcomeUnknown(f.Type)
		a.LastFailure = storableFailure(f) // describe shows why it retries
		// The failed attempt is over: the next one's number is taken now,
		// so a late result or heartbeat of the old one is stale.
		a.Attempt++
		retryAt := b.now.Add(delay)
		a.RetryAt = &retryAt
		b.activityChanged(ref, a)
		attrs, _ := json.Marshal(activityTimerAttrs{ActivityID: a.ActivityID, Attempt: a.Attempt})
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: a.ExecutionID, Kind: store.TimerActivityRetry, FireAt: retryAt, Attrs: attrs})
		if b.debug {
			b.logFor(a.ExecutionID, logattr.ActivityAttempt(a.ActivityName, a.ActivityID, a.Attempt-1)...).Debug("activity attempt failed; retrying",
				"failure", f.Type, "retry_in", delay, "err", f.Message)
		}
		return
	}
	a.Status = store.ActivityFailed
	b.activityChanged(ref, a)
	b.writes.ActivityDone = append(b.writes.ActivityDone, ref)
	b.appendEvent(e, wire.EventActivityFailed, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: a.Attempt, Failure: f,
		StartedAt: startedAt, EndedAt: endedAt})
	b.needWorkflowTask(e)
}

// outcomeUnknown says whether a failure of type typ leaves the attempt's
// effect unknown: it ended without the activity reporting.
func outcomeUnknown(typ string) bool {
	switch typ {
	case "StartToCloseTimeout", "HeartbeatTimeout", "WorkerShutdown", "ReconcileFailed", "WorkerLost":
		return true
	}
	return false
}

// activityTimerAttrs are the attributes of activity timers.
type activityTimerAttrs struct {
	ActivityID int `json:"activity_id"`
	Attempt    int `json:"attempt"`
}

// dispatchAttempt publishes the activity's current attempt and sets the
// timer that ends it if no result comes in time: the scheduler owns
// attempts, so a vanished worker's attempt is retried, never run twice.
func (b *batch) dispatchAttempt(e *store.Execution, a *store.Activity) {
	a.RetryAt = nil // an attempt is in flight
	opts := activityOptions(a)
	queue := cmp.Or(opts.TaskQueue, e.TaskQueue)
	if err := cmp.Or(dedup.ValidateName(a.ActivityName), dedup.ValidateName(queue)); err != nil {
		// No worker could register it: its task would wait in the stream
		// for ever. The workflow sees the activity fail.
		b.attemptFailed(e, a, &wire.Failure{Type: "InvalidActivity", NonRetryable: true,
			Message: fmt.Sprintf("activity %q on task queue %q cannot be dispatched: %v", a.ActivityName, queue, err)})
		return
	}
	if p := opts.Priority; p != 0 && validPriority(p) != p {
		b.attemptFailed(e, a, &wire.Failure{Type: "InvalidActivity", NonRetryable: true,
			Message: fmt.Sprintf("activity %q has priority %d: want %d (lowest) to %d (highest)", a.ActivityName, p, wire.MinPriority, wire.MaxPriority)})
		return
	}
	at := decide.Attempt{
		ExecutionID: e.ExecutionID, Shard: b.shard, WorkflowName: e.WorkflowName, TaskQueue: queue,
		Activity: decide.Activity{ID: a.ActivityID, Name: a.ActivityName, Key: a.IdempotencyKey, Input: a.Input, Options: opts},
		Number:   a.Attempt, ScheduledAt: a.ScheduledAt, HeartbeatDetails: a.HeartbeatDetails, PreviousOutcomeUnknown: a.OutcomeUnknown,
	}
	task := at.Task(b.now)
	data, _ := json.Marshal(task)
	if b.maxTask > 0 && len(data) > b.maxTask {
		// Every attempt's task would be as large (its input): the
		// activity fails, and the workflow sees it.
		b.logFor(e.ExecutionID, logattr.ActivityAttempt(a.ActivityName, a.ActivityID, a.Attempt)...).Error("failing an activity whose task is too large for NATS",
			"bytes", len(data), "limit", b.maxTask)
		b.attemptFailed(e, a, &wire.Failure{Type: "ActivityTaskTooLarge", NonRetryable: true,
			Message: fmt.Sprintf("the activity's task (its input) is %d bytes: more than the %d NATS carries", len(data), b.maxTask)})
		return
	}
	b.writes.Outbox = append(b.writes.Outbox, &store.OutboxMsg{
		Shard: b.shard, Subject: broker.PriorityTaskSubject(queue, wire.TaskActivity, a.ActivityName, cmp.Or(opts.Priority, validPriority(e.Priority))),
		MsgID: fmt.Sprintf("act:%s:%d:%d", e.ExecutionID, a.ActivityID, a.Attempt), Payload: data, Trace: b.traceOf(e),
	})
	attrs, _ := json.Marshal(activityTimerAttrs{ActivityID: a.ActivityID, Attempt: a.Attempt})
	b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerActivityTimeout, FireAt: task.Deadline, Attrs: attrs})
	if hb := time.Duration(opts.HeartbeatTimeoutMS) * time.Millisecond; hb > 0 {
		now := b.now
		a.LastHeartbeatAt = &now
		b.writes.NewTimers = append(b.writes.NewTimers, store.Timer{ExecutionID: e.ExecutionID, Kind: store.TimerActivityHeartbeat, FireAt: b.now.Add(hb), Attrs: attrs})
	}
}

// activityCancelled closes a, which the workflow gave up, as Cancelled:
// its attempt in flight ended without completing (f), or none was in
// flight. The workflow's Future fails with a canceled error.
func (b *batch) activityCancelled(e *store.Execution, a *store.Activity, f *wire.Failure) {
	ref := store.ActivityRef{ExecutionID: a.ExecutionID, ActivityID: a.ActivityID}
	a.Status = store.ActivityCancelled
	b.activityChanged(ref, a)
	b.writes.ActivityDone = append(b.writes.ActivityDone, ref)
	b.appendEvent(e, wire.EventActivityCancelled, wire.ActivityClosedAttrs{ActivityID: a.ActivityID, ActivityName: a.ActivityName, Attempt: a.Attempt, Failure: f})
	b.needWorkflowTask(e)
}
