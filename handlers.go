package harvest

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"

	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// This file is what a Worker hands its runtime (internal/workerrt): the
// registrations, seen through workerrt.Handlers.

// workflowTask returns the function that replays the named workflow's
// tasks with the activities' registration options.
func (w *Worker) workflowTask(name string) (workerrt.WorkflowFunc, bool) {
	w.mu.Lock()
	fn := w.workflows[name]
	opts := w.activityOptions
	w.mu.Unlock()
	if fn == nil {
		return nil, false
	}
	return runOn(w.cache, fn, opts), true
}

// checkReplay returns the function that replays one history of workflow
// fn for the replay check (WorkerConfig.ReplayCheck): a workflow task's
// replay, on a fresh execution that no cache keeps (the worker's cache
// would carry the check's execution on to the real tasks), with the
// workflow code's logs discarded (its last task runs as new code would,
// logging what it has not done).
func checkReplay(fn workflowFunc, opts map[string]ActivityOptions) workerrt.WorkflowFunc {
	return func(task *wire.WorkflowTask) (workerrt.WorkflowRun, error) {
		return runOn(newWorkflowCache(0, slog.New(slog.DiscardHandler)), fn, opts)(task)
	}
}

// runOn returns the function that runs workflow fn's tasks on cache,
// with the activities' registration options opts; an error that the same
// code cannot get past is a *workerrt.TaskFailureError.
func runOn(cache *workflowCache, fn workflowFunc, opts map[string]ActivityOptions) workerrt.WorkflowFunc {
	return func(task *wire.WorkflowTask) (workerrt.WorkflowRun, error) {
		run, err := cache.run(fn, task, opts)
		if f := taskFailure(err); f != nil {
			return run, f
		}
		return run, err
	}
}

// hasActivity says whether the activity name is registered.
func (w *Worker) hasActivity(name string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.activities[name] != nil
}

// runAttempt runs the user's code for one activity attempt: the reconcile
// function first when the previous attempt's outcome is unknown, then,
// unless it found the effect, the activity.
func (w *Worker) runAttempt(ctx context.Context, a *workerrt.Attempt) (any, error) {
	task := a.Task
	w.mu.Lock()
	fn := w.activities[task.ActivityName]
	reconcile := w.reconcilers[task.ActivityName]
	w.mu.Unlock()
	ac := &ActivityContext{Context: ctx, details: task.HeartbeatDetails, heartbeat: a.Heartbeat, ledger: a.Ledger, ledgerUsed: a.LedgerUsed, info: ActivityInfo{
		ExecutionID: task.ExecutionID, WorkflowName: task.WorkflowName, ActivityName: task.ActivityName,
		ActivityID: task.ActivityID, Attempt: task.Attempt, IdempotencyKey: ActivityKey(task.IdempotencyKey),
		ScheduledAt: task.ScheduledAt, Deadline: task.Deadline, PreviousOutcomeUnknown: task.PreviousOutcomeUnknown,
	}}
	var res any
	var err error
	found := false
	if task.PreviousOutcomeUnknown && reconcile != nil {
		// The previous attempt may have had its effect: look before
		// repeating it.
		err = recovered(func() (err error) {
			res, found, err = reconcile(ac, task.Input)
			return err
		})
		if found {
			a.Log.Info("reconciled: the effect had happened; not repeating it")
		}
		if err != nil {
			// The effect's fate is still unknown: the next attempt must
			// reconcile too.
			err = &ApplicationError{Type: "ReconcileFailed", Message: err.Error()}
		}
	}
	if !found && err == nil {
		err = recovered(func() (err error) {
			res, err = fn(ac, task.Input)
			return err
		})
	}
	return res, err
}

// attemptFailure is the wire form of the error an attempt failed with.
func attemptFailure(err error) *wire.Failure {
	f := failureOf(err)
	var pe *panicError
	if errors.As(err, &pe) {
		f.Type, f.Stack = "panic", pe.stack
	}
	return f
}

// recovered runs user code, turning its panic into a *panicError, with
// the stack, that fails the attempt.
func recovered(run func() error) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = &panicError{value: p, stack: string(debug.Stack())}
		}
	}()
	return run()
}

type panicError struct {
	value any
	stack string
}

func (e *panicError) Error() string { return fmt.Sprintf("activity panicked: %v", e.value) }
