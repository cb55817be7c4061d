package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"time"

	"github.com/sourcegraph/conc"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// completeWorkflowTask runs a workflow task and returns its result. When
// the task only schedules activities this worker can run eagerly and it has
// a free slot for each, it runs their first attempts at once and, if they
// all complete, the next workflow task over their results, and returns all
// of it as one result: one command, one scheduler transaction, instead of
// three of each and two task messages. A stopping worker runs nothing
// eagerly.
//
// No guarantee is weaker for it. Each activity's idempotency key is derived
// from the execution and the activity's id, so an eager attempt hands
// downstream systems the key every later attempt would. The workflow task
// is kept in progress meanwhile and acknowledged only after the result is
// published; if this worker vanishes before that, the task is delivered
// again within TaskAckWait, and the worker that takes it runs nothing
// eagerly and marks the activities PossiblyStarted, so their attempt 1
// counts as lost and attempt 2 reconciles first. (A delivery handed back
// unstarted does not count: see earlierUnstarted.) The scheduler takes the
// speculative next task only if nothing else happened to the execution in
// the meantime.
func (rt *Runtime) completeWorkflowTask(ctx context.Context, t *heldTask, run WorkflowFunc, task *wire.WorkflowTask) (*wire.WorkflowTaskResult, error) {
	ran, err := rt.replay(run, task, replayTask)
	if errors.Is(err, ErrHistoryNeeded) && !task.Whole() {
		if err = rt.fetchHistory(ctx, task); err != nil {
			return nil, err
		}
		ran, err = rt.replay(run, task, replayTask)
	}
	if err != nil {
		return nil, err
	}
	decisions := ran.Decisions
	res := NewWorkflowTaskResult(task, decisions, rt.buildID)
	res.Rejections, res.Idle = ran.Rejections, ran.Idle
	res.States, res.Waiting = ran.States, ran.Waiting
	res.Sticky = rt.stickyFor(task.WorkflowName, ran.Kept)
	if !eagerShape(decisions) {
		return res, nil
	}
	if task.Redispatch > 0 || !rt.earlierUnstarted(ctx, t) {
		// An earlier delivery of this task, on this worker or another,
		// may have run these attempts; so may an earlier dispatch, for a
		// task the scheduler dispatched again.
		MarkPossiblyStarted(res.Decisions)
		return res, nil
	}
	if rt.isStopping() || !rt.eagerEligible(decisions) || !rt.takeSlots(len(decisions)) {
		return res, nil
	}
	res.Eager = rt.runEager(ctx, t, task, decisions)
	rt.releaseSlots(len(decisions))
	if len(res.Eager) != len(decisions) {
		return res, nil
	}
	for _, r := range res.Eager {
		if r.Failure != nil {
			// The scheduler decides what a failed attempt leads to.
			return res, nil
		}
	}
	next := *task
	next.TaskID++
	next.History = eagerHistory(task, decisions, res.Eager, rt.buildID)
	// The next task's time is this worker's clock, never before the
	// task's own (a workflow's Now does not go back).
	next.Time = time.Now().UTC()
	if next.Time.Before(task.Time) {
		next.Time = task.Time
	}
	next.Updates = nil // the scheduler's next task carries them
	nextRun, err := rt.replay(run, &next, replaySpeculative)
	if err != nil {
		// The scheduler dispatches the next task as usual, and its worker
		// meets the same error there.
		rt.taskLog(t).Warn("speculative workflow task failed", "err", err)
		return res, nil
	}
	res.Next = NewWorkflowTaskResult(&next, nextRun.Decisions, rt.buildID)
	res.Next.States, res.Next.Waiting = nextRun.States, nextRun.Waiting
	res.Next.Sticky = rt.stickyFor(task.WorkflowName, nextRun.Kept)
	return res, nil
}

// NewWorkflowTaskResult is the result of task that took decisions, on a
// worker of build buildID.
func NewWorkflowTaskResult(task *wire.WorkflowTask, decisions []wire.Decision, buildID string) *wire.WorkflowTaskResult {
	return &wire.WorkflowTaskResult{ExecutionID: task.ExecutionID, TaskID: task.TaskID, Decisions: decisions, BaseSeq: lastSeq(task.History),
		Time: task.Time, BuildID: buildID, ContinueAsNewSuggested: task.ContinueAsNewSuggested}
}

// MarkPossiblyStarted marks the activities decisions schedule as possibly
// started, when an earlier delivery of their task could have run them
// eagerly (they are all activities, none with a heartbeat timeout): the
// scheduler then counts their attempt 1 lost. It says whether it marked
// them.
func MarkPossiblyStarted(decisions []wire.Decision) bool {
	if !eagerShape(decisions) {
		return false
	}
	for i := range decisions {
		decisions[i].PossiblyStarted = true
	}
	return true
}

// replay runs task with run, counted in the metrics as a replay of kind.
func (rt *Runtime) replay(run WorkflowFunc, task *wire.WorkflowTask, kind string) (WorkflowRun, error) {
	name := rt.workflowLabel(task.WorkflowName)
	began := time.Now()
	res, err := run(task)
	if errors.Is(err, ErrHistoryNeeded) {
		return WorkflowRun{}, err // nothing ran
	}
	rt.metrics.replaySeconds.WithLabelValues(name).Observe(time.Since(began).Seconds())
	rt.metrics.replays.WithLabelValues(name, kind).Inc()
	rt.metrics.replayEvents.WithLabelValues(name).Add(float64(res.Events))
	cache := cacheMiss
	if res.Cached {
		cache = cacheHit
	}
	rt.metrics.cache.WithLabelValues(name, cache).Inc()
	if res.Evicted > 0 {
		rt.metrics.cacheEvicted.WithLabelValues().Add(float64(res.Evicted))
	}
	return res, err
}

// eagerShape says whether a worker may run decisions' activities eagerly:
// the decisions only schedule activities, none with a heartbeat timeout
// (the scheduler watches heartbeats only of attempts it dispatched).
func eagerShape(decisions []wire.Decision) bool {
	if len(decisions) == 0 {
		return false
	}
	for _, d := range decisions {
		if d.Type != wire.DecisionScheduleActivity || (d.Options != nil && d.Options.HeartbeatTimeoutMS > 0) {
			return false
		}
	}
	return true
}

// eagerEligible says whether this worker runs decisions' activities
// eagerly: it has them all, on its own task queue (an activity sent to
// another queue runs only there), and eager dispatch is on.
func (rt *Runtime) eagerEligible(decisions []wire.Decision) bool {
	if rt.cfg.DisableEagerActivities || len(decisions) > rt.cfg.ActivityConcurrency {
		return false
	}
	for _, d := range decisions {
		if !rt.h.HasActivity(d.ActivityName) || (d.Options != nil && d.Options.TaskQueue != "" && d.Options.TaskQueue != rt.cfg.TaskQueue) {
			return false
		}
	}
	return true
}

// takeSlots takes n activity slots if they are all free now and no
// task waits for one.
func (rt *Runtime) takeSlots(n int) bool { return rt.slots.tryTake(n) }

func (rt *Runtime) releaseSlots(n int) {
	for range n {
		rt.slots.give()
	}
}

// runEager runs attempt 1 of each activity decisions schedule, at once and
// side by side, keeping the workflow task t in progress meanwhile, up to
// the latest of the attempts' deadlines. It returns the results in
// decision order, leaving out attempts not run (the execution was
// cancelled).
func (rt *Runtime) runEager(ctx context.Context, t *heldTask, task *wire.WorkflowTask, decisions []wire.Decision) []wire.ActivityResult {
	results := make([]*wire.ActivityResult, len(decisions))
	tasks := make([]*wire.ActivityTask, len(decisions))
	var last time.Time
	for i, d := range decisions {
		tasks[i] = eagerTask(task, d, time.Now())
		if tasks[i].Deadline.After(last) {
			last = tasks[i].Deadline
		}
	}
	// An attempt that ignores its deadline must not hold the execution:
	// past the deadlines the task is let go, and is delivered again to a
	// worker that dispatches the attempts through the scheduler.
	t.keepUntil(last)
	var attempts conc.WaitGroup
	for i, at := range tasks {
		// An eager attempt's result goes in the workflow task's, whose
		// command id t's lines carry.
		log := rt.taskLog(t).With(logattr.ActivityAttempt(at.ActivityName, at.ActivityID, at.Attempt)...)
		attempts.Go(func() {
			actx := ctx
			if tr := rt.top.Tracing; tr.Enabled() {
				var span trace.Span
				actx, span = tr.Start(ctx, "activity "+at.ActivityName, trace.WithAttributes(activityAttrs(at)...),
					trace.WithAttributes(tracing.AttrEager.Bool(true)))
				defer span.End()
			}
			results[i] = rt.runAttempt(actx, log, at, true)
		})
	}
	attempts.Wait()
	if time.Now().Before(last) {
		t.keepUntil(time.Time{}) // in time: kept until its result is published
	}
	out := make([]wire.ActivityResult, 0, len(results))
	for _, r := range results {
		if r != nil {
			out = append(out, *r)
		}
	}
	return out
}

// eagerTask is attempt 1 of the activity d schedules, as the scheduler
// would dispatch it at now (decide's Attempt).
func eagerTask(task *wire.WorkflowTask, d wire.Decision, now time.Time) *wire.ActivityTask {
	rec, err := decide.Record(decide.KeysOf(task.ExecutionID, task.ResetKeys), &d, now)
	if err != nil || rec.Activity == nil {
		return nil // eagerShape lets only activities through
	}
	at := decide.Attempt{ExecutionID: task.ExecutionID, Shard: task.Shard, WorkflowName: task.WorkflowName, TaskQueue: task.TaskQueue,
		Activity: *rec.Activity, Number: 1, ScheduledAt: now}
	return at.Task(now)
}

// eagerHistory is task's history followed by the events the scheduler
// writes when it applies decisions and their eager results (as decide
// says): the task's WorkflowTaskCompleted, the activities'
// ActivityScheduled events in decision order, then their
// ActivityCompleted events in result order.
func eagerHistory(task *wire.WorkflowTask, decisions []wire.Decision, results []wire.ActivityResult, buildID string) []wire.Event {
	hist := make([]wire.Event, len(task.History), len(task.History)+1+len(decisions)+len(results))
	copy(hist, task.History)
	seq := lastSeq(task.History)
	add := func(typ string, attrs any) {
		raw, _ := json.Marshal(attrs)
		seq++
		hist = append(hist, wire.Event{Seq: seq, Type: typ, Attrs: raw})
	}
	typ, attrs := decide.TaskCompleted(task.TaskID, seq, task.Time, buildID)
	attrs.ContinueAsNewSuggested = task.ContinueAsNewSuggested // as the scheduler records it
	add(typ, attrs)
	names := map[int]string{}
	for i := range decisions {
		d := &decisions[i]
		rec, err := decide.Record(decide.KeysOf(task.ExecutionID, task.ResetKeys), d, task.Time)
		if err != nil {
			continue // eagerShape lets only activities through
		}
		names[d.ActivityID] = d.ActivityName
		add(rec.Event, rec.Attrs)
	}
	for _, r := range results {
		add(decide.ActivityCompleted(r.ActivityID, names[r.ActivityID], 1, r.Result))
	}
	return hist
}

// TaskTime is the time of a task that does not say its own: that of the
// last event it carries, else now.
func TaskTime(task *wire.WorkflowTask) time.Time {
	if n := len(task.History); n > 0 && !task.History[n-1].At.IsZero() {
		return task.History[n-1].At.UTC()
	}
	return time.Now().UTC()
}

// lastSeq is the seq of history's last event, 0 for none.
func lastSeq(history []wire.Event) int {
	if len(history) == 0 {
		return 0
	}
	return history[len(history)-1].Seq
}
