package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/tracing"
	"github.com/harvest-engine/harvest/internal/wire"
)

// logUnknown logs a task of a workflow or activity this worker does not
// register, handed back for a worker of the task queue that does: a
// warning the first time for each name, then at debug level, since the
// task comes back every UnknownTaskDelay until such a worker takes it.
// Tasks are routed by name, so only a task an older scheduler wrote to
// the task queue's unrouted subject can come here.
func (rt *Runtime) logUnknown(log *slog.Logger, kind, name string) {
	msg := kind + " not registered on this worker; handing its task back for a worker of the task queue that registers it"
	if _, seen := rt.unknown.LoadOrStore(kind+"/"+name, true); seen {
		log.Debug(msg)
		return
	}
	log.Warn(msg)
}

// takeSlot waits for a free slot of slots (the workflow or the activity
// slots) for t, a task of kind, behind the waiting tasks of its priority
// and higher; when Stop begins first, it hands t back and reports false.
func (rt *Runtime) takeSlot(t *heldTask, slots *slotSet, kind string) bool {
	if slots.take(broker.TaskPriority(t.m.Subject()), rt.stopping) {
		return true
	}
	rt.handBack(t, 0, handBackStopping, kind)
	return false
}

// handleWorkflowTask replays a workflow task and reports its decisions,
// then acknowledges it; it says how the task was settled.
func (rt *Runtime) handleWorkflowTask(ctx context.Context, t *heldTask) (o outcome) {
	var task wire.WorkflowTask
	defer func() {
		rt.metrics.workflowTasks.WithLabelValues(rt.workflowLabel(task.WorkflowName), o.String()).Inc()
	}()
	if err := json.Unmarshal(t.m.Data(), &task); err != nil {
		rt.log.Error("dropping malformed workflow task", "err", err)
		_ = t.m.Term()
		return outcomeDropped
	}
	// The task's result goes under commandID: the lines about the task
	// carry it, as the scheduler's about applying it do.
	commandID := dedup.WorkflowTaskCommandID(task.ExecutionID, task.TaskID)
	log := logattr.With(rt.log, task.ExecutionID, task.WorkflowName, commandID, "task_id", task.TaskID)
	t.log = log
	ctx, span := rt.taskSpan(ctx, t, "workflow task "+task.WorkflowName, func() []attribute.KeyValue {
		return []attribute.KeyValue{tracing.AttrWorkflow.String(task.WorkflowName),
			tracing.AttrExecutionID.String(task.ExecutionID), tracing.AttrTaskID.Int(task.TaskID)}
	})
	if span != nil {
		defer func() { endTaskSpan(span, o) }()
	}
	run, ok := rt.h.Workflow(task.WorkflowName)
	if !ok || rt.refused[task.WorkflowName] {
		rt.logUnknown(log, "workflow", task.WorkflowName)
		rt.handBack(t, UnknownTaskDelay, handBackUnknown, wire.TaskWorkflow)
		return outcomeHandedBack
	}
	// A task that arrived while every workflow slot was taken waits for
	// one, held in progress.
	if !rt.takeSlot(t, rt.wfSlots, wire.TaskWorkflow) {
		return outcomeHandedBack
	}
	defer rt.wfSlots.give()
	if task.Time.IsZero() {
		// A task from a scheduler that does not say its time: the time of
		// the last event it carries, else this worker's clock.
		task.Time = TaskTime(&task)
	}
	result, err := rt.completeWorkflowTask(ctx, t, run, &task)
	if errors.Is(err, errExecutionGone) {
		// Pruned since the task was dispatched: nothing is left to run.
		log.Warn("dropping a workflow task whose execution no longer exists")
		_ = t.m.Term()
		return outcomeDropped
	}
	if err != nil {
		// Nothing ran: the task failed before any eager attempt.
		log.Error("workflow task failed; will retry", "err", err)
		var failed *TaskFailureError
		if errors.As(err, &failed) && rt.reportTaskFailure(ctx, t, &task, failed.Failure) {
			return outcomeFailed
		}
		rt.handBack(t, FailedTaskDelay, handBackRetry, wire.TaskWorkflow)
		return outcomeFailed
	}
	cmd := &wire.Command{
		CommandID:    commandID,
		Kind:         wire.KindWorkflowTaskCompleted,
		WorkflowTask: result,
	}
	// A stopping worker still reports what it did: eager attempts it
	// handed back are retried at once, not after the task's AckWait.
	pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer pcancel()
	err = rt.publishResult(pctx, task.Shard, cmd)
	var big *broker.TooLargeError
	if errors.As(err, &big) {
		// Every run of this task decides the same: the workflow cannot go
		// on. It fails, rather than have its task handed back for ever.
		log.Error("workflow task result too large for the command stream; failing the workflow", "bytes", big.Size, "limit", big.Limit)
		cmd.WorkflowTask = tooLargeResult(result, big)
		err = rt.publishResult(pctx, task.Shard, cmd)
	}
	if err != nil {
		// The result may have been stored all the same (its
		// acknowledgement lost): the next delivery must not count as a
		// first, so it runs nothing eagerly and marks eager activities
		// possibly started.
		log.Error("publish workflow task result; handing the task back", "err", err)
		rt.keeper.drop(t)
		_ = t.m.Nak()
		return outcomeFailed
	}
	if err := t.m.Ack(); err != nil {
		log.Warn("ack workflow task", "err", err)
	}
	if log.Enabled(ctx, slog.LevelDebug) {
		log.DebugContext(ctx, "workflow task completed", "decisions", len(result.Decisions), "eager_attempts", len(result.Eager),
			"speculative", result.Next != nil)
	}
	return outcomeCompleted
}

// handleActivityTask runs the attempt an activity task carries and
// reports how it ended, then acknowledges the task. The scheduler owns
// attempts: the task stays unacknowledged (and in progress) until its
// result is published, and a task delivered again after an earlier
// delivery may have started the attempt (its worker vanished, or its
// in-progress acknowledgements stopped reaching the server) never runs
// it again: the attempt is reported lost (WorkerLost), and the scheduler
// retries it after the policy's wait, reconciling first; the worker
// reporting it needs no slot, nor the activity. A task for an activity
// this worker does not have is handed back for the others. It says how
// the task was settled.
func (rt *Runtime) handleActivityTask(ctx context.Context, t *heldTask) (o outcome) {
	var task wire.ActivityTask
	if err := json.Unmarshal(t.m.Data(), &task); err != nil {
		rt.log.Error("dropping malformed activity task", "err", err)
		_ = t.m.Term()
		return outcomeDropped
	}
	// The attempt's result goes under the command id the lines carry.
	log := logattr.With(rt.log, task.ExecutionID, task.WorkflowName, dedup.ActivityResultCommandID(task.ExecutionID, task.ActivityID, task.Attempt),
		logattr.ActivityAttempt(task.ActivityName, task.ActivityID, task.Attempt)...)
	t.log = log
	ctx, span := rt.taskSpan(ctx, t, "activity "+task.ActivityName, func() []attribute.KeyValue { return activityAttrs(&task) })
	if span != nil {
		defer func() { endTaskSpan(span, o) }()
	}
	if !rt.earlierUnstarted(ctx, t) {
		// Past its deadline the scheduler's timer has failed the attempt
		// already: there is nothing to report.
		var lost *wire.ActivityResult
		if task.Deadline.IsZero() || time.Now().Before(task.Deadline) {
			log.Warn("activity task delivered again: its earlier worker may have run it; reporting the attempt lost", "delivery", t.delivery())
			lost = LostAttempt(&task)
		}
		return rt.settleActivity(ctx, t, &task, lost)
	}
	if !rt.h.HasActivity(task.ActivityName) {
		rt.logUnknown(log, "activity", task.ActivityName)
		rt.handBack(t, UnknownTaskDelay, handBackUnknown, wire.TaskActivity)
		return outcomeHandedBack
	}
	// Eager attempts share the slots; they never wait for one, so this
	// wait ends when one of them does, or when Stop hands the task back.
	if rt.isStopping() {
		rt.handBack(t, 0, handBackStopping, wire.TaskActivity)
		return outcomeHandedBack
	}
	if !rt.takeSlot(t, rt.slots, wire.TaskActivity) {
		return outcomeHandedBack
	}
	result := rt.runAttempt(ctx, log, &task, false)
	rt.slots.give()
	return rt.settleActivity(ctx, t, &task, result)
}

// publishResult publishes a task's result. A full command stream (the
// schedulers have not been applying commands, and it holds its max bytes)
// is waited out while ctx lasts, the result in hand: handing the task
// back at once would bring it straight back, to report its attempt lost
// to a stream that is still full.
func (rt *Runtime) publishResult(ctx context.Context, shard int, cmd *wire.Command) error {
	wait := 100 * time.Millisecond
	for {
		_, err := rt.top.PublishCommand(ctx, shard, cmd)
		if !errors.Is(err, broker.ErrStreamFull) {
			return err
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return err
		case <-t.C:
		}
		wait = min(wait*2, 2*time.Second)
	}
}

// tooLargeResult is what a workflow task reports instead of res when res
// is too large for the command stream: the workflow fails. Eager attempts
// it ran are left out; the scheduler counts them lost, which is moot once
// the workflow has closed.
func tooLargeResult(res *wire.WorkflowTaskResult, big *broker.TooLargeError) *wire.WorkflowTaskResult {
	return &wire.WorkflowTaskResult{ExecutionID: res.ExecutionID, TaskID: res.TaskID, BaseSeq: res.BaseSeq, Decisions: []wire.Decision{{
		Type: wire.DecisionFailWorkflow,
		Failure: &wire.Failure{Type: "WorkflowTaskTooLarge", NonRetryable: true,
			Message: fmt.Sprintf("the workflow task's decisions, as a command, are %d bytes: more than the %d the command stream carries", big.Size, big.Limit)},
	}}}
}

// settleActivity publishes an attempt's result, if any, then acknowledges
// its task. If the result cannot be published (a full command stream is
// waited out for the publish's 30 s first) the task is handed back
// unacknowledged: its next delivery reports the attempt lost, and the
// next attempt reconciles first. It says how the task was settled.
func (rt *Runtime) settleActivity(ctx context.Context, t *heldTask, task *wire.ActivityTask, result *wire.ActivityResult) outcome {
	o := outcomeDropped
	if result != nil {
		cmd := &wire.Command{
			CommandID: dedup.ActivityResultCommandID(task.ExecutionID, task.ActivityID, task.Attempt),
			Kind:      wire.KindActivityResult,
			Activity:  result,
		}
		pctx, pcancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
		defer pcancel()
		err := rt.publishResult(pctx, task.Shard, cmd)
		var big *broker.TooLargeError
		if errors.As(err, &big) {
			// Every attempt would return as much: the activity fails.
			rt.taskLog(t).Error("activity result too large for the command stream; failing the activity", "bytes", big.Size, "limit", big.Limit)
			cmd.Activity = &wire.ActivityResult{ExecutionID: result.ExecutionID, ActivityID: result.ActivityID, Attempt: result.Attempt,
				Failure: &wire.Failure{Type: "ResultTooLarge", NonRetryable: true,
					Message: fmt.Sprintf("the attempt's result, as a command, is %d bytes: more than the %d the command stream carries", big.Size, big.Limit)}}
			err = rt.publishResult(pctx, task.Shard, cmd)
		}
		if err != nil {
			rt.taskLog(t).Error("publish activity result; handing the task back", "err", err)
			rt.keeper.drop(t)
			_ = t.m.Nak()
			return outcomeFailed
		}
		o = outcomeCompleted
		if cmd.Activity.Failure != nil {
			o = outcomeFailed
		}
	}
	if err := t.m.Ack(); err != nil {
		rt.taskLog(t).Warn("ack activity task", "err", err)
	}
	return o
}

// taskSpan starts the span of a task a worker handles, a child of the
// trace context its message carries (the scheduler's apply of the
// command that dispatched it); span is nil when tracing is off.
func (rt *Runtime) taskSpan(ctx context.Context, t *heldTask, name string, attrs func() []attribute.KeyValue) (context.Context, trace.Span) {
	tr := rt.top.Tracing
	if !tr.Enabled() {
		return ctx, nil
	}
	return tr.Start(tr.Extract(ctx, t.m.Headers()), name, trace.WithSpanKind(trace.SpanKindConsumer), trace.WithAttributes(attrs()...))
}

// activityAttrs are the span attributes of an activity attempt.
func activityAttrs(task *wire.ActivityTask) []attribute.KeyValue {
	return []attribute.KeyValue{
		tracing.AttrExecutionID.String(task.ExecutionID), tracing.AttrWorkflow.String(task.WorkflowName),
		tracing.AttrActivity.String(task.ActivityName), tracing.AttrAttempt.Int(task.Attempt),
	}
}

// endTaskSpan ends a task's span with how the task was settled.
func endTaskSpan(span trace.Span, o outcome) {
	span.SetAttributes(tracing.AttrOutcome.String(o.String()))
	if o == outcomeFailed {
		span.SetStatus(codes.Error, o.String())
	}
	span.End()
}

// maxFailureText bounds each text of a reported task failure: a
// divergence quotes decisions, whose inputs can be large.
const maxFailureText = 4 << 10

// reportTaskFailure reports a workflow task its code cannot complete to
// the scheduler, which shows the execution as failing its task and
// dispatches the task again after a backoff, then acknowledges the task.
// It says whether it did; a task whose report could not be published is
// handed back instead, as before.
func (rt *Runtime) reportTaskFailure(ctx context.Context, t *heldTask, task *wire.WorkflowTask, f wire.WorkflowTaskFailure) bool {
	f.ExecutionID, f.TaskID, f.BuildID = task.ExecutionID, task.TaskID, rt.buildID
	f.Message, f.History, f.Code = clip(f.Message), clip(f.History), clip(f.Code)
	cmd := &wire.Command{CommandID: dedup.WorkflowTaskFailedCommandID(task.ExecutionID, task.TaskID), Kind: wire.KindWorkflowTaskFailed, TaskFailure: &f}
	pctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	if err := rt.publishResult(pctx, task.Shard, cmd); err != nil {
		t.log.Error("report workflow task failure; handing the task back", "err", err)
		return false
	}
	rt.metrics.taskFailures.WithLabelValues(rt.workflowLabel(task.WorkflowName), f.Reason).Inc()
	if err := t.m.Ack(); err != nil {
		t.log.Warn("ack workflow task", "err", err)
	}
	return true
}

// clip cuts s to maxFailureText bytes, on a rune boundary, saying so.
func clip(s string) string {
	if len(s) <= maxFailureText {
		return s
	}
	cut := maxFailureText
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
