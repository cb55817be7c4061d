package scheduler

import (
	"context"
	"errors"
	"time"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
)

// Sticky workflow tasks (docs/long-workflows.md#sticky-workflow-tasks).
// A worker that keeps an execution in its cache after a workflow task
// says so in the task's result (wire.WorkflowTaskResult.Sticky); the
// execution's next task goes to that worker's own subject
// (broker.StickyTaskSubject), which only its sticky consumer takes, so
// that it runs on from its cache rather than another worker fetching
// and replaying the history. A sticky task has a short deadline
// (stickyTimeout): when it passes and the worker has not taken the task
// (its consumer did not deliver it, or is gone with the worker, or the
// worker handed it back), the task is moved to the subject every worker
// of the workflow shares, and the execution is sticky no more until a
// worker's result says so again. A task the worker took is looked at
// again later, the wait doubling, in case the worker dies with it.

// stickyTimeout is how long a sticky workflow task waits for its worker
// to take it before it goes to any worker.
const stickyTimeout = 2 * time.Second

// maxStickyCheck caps the wait between two looks at a sticky task its
// worker took.
const maxStickyCheck = 30 * time.Second

// stickyState is what became of a sticky workflow task, as its deadline
// passes.
type stickyState int

const (
	// stickyNotTaken: its worker has not taken it (or is gone): move it.
	stickyNotTaken stickyState = iota
	// stickyTaken: its worker holds it: look again later.
	stickyTaken
	// stickyDone: the stream no longer holds it: its worker acknowledged
	// it (its result is on the command stream). The usual deadline looks
	// after a result lost.
	stickyDone
)

// stickyState tells what became of e's sticky workflow task taskID. It
// asks the task stream for the task's message and the worker's sticky
// consumer whether it delivered it; a task it moves is deleted from the
// stream (stickyNotTaken), so that the worker, should it come back to
// it, does not run it too. A question NATS does not answer counts as
// taken (nothing moves while NATS is away). A task published by an
// earlier runner, whose message it does not know, counts as not taken:
// at worst both copies run, and the scheduler takes the first result.
func (r *runner) stickyState(ctx context.Context, e *store.Execution, taskID int) stickyState {
	t, ok := r.tasks[e.ExecutionID]
	if !ok || t.taskID != taskID {
		return stickyNotTaken
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	log := logattr.With(r.log, e.ExecutionID, e.WorkflowName, "")
	st, err := r.taskStream(ctx)
	if err == nil {
		_, err = st.GetMsg(ctx, t.seq)
	}
	switch {
	case errors.Is(err, jetstream.ErrMsgNotFound):
		return stickyDone
	case err != nil:
		log.Warn("look up a sticky workflow task in the task stream", "task_id", taskID, "err", err)
		return stickyTaken
	}
	cons, err := r.s.cfg.Topology.JS.Consumer(ctx, broker.TaskStream, broker.StickyConsumerName(e.TaskQueue, e.WorkflowName, e.StickyWorker))
	if err == nil {
		info := cons.CachedInfo()
		if info.Delivered.Stream >= t.seq && info.NumAckPending > 0 {
			return stickyTaken
		}
	} else if !errors.Is(err, jetstream.ErrConsumerNotFound) {
		log.Warn("look up a worker's sticky consumer", "task_id", taskID, "worker", e.StickyWorker, "err", err)
		return stickyTaken
	}
	if err := st.DeleteMsg(ctx, t.seq); err != nil {
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			return stickyDone // taken and acknowledged meanwhile
		}
		log.Warn("delete a sticky workflow task its worker did not take; moving it anyway", "task_id", taskID, "err", err)
	}
	return stickyNotTaken
}

// stickyTimer handles the deadline of e's sticky workflow task at: it
// moves the task to every worker (again) unless its worker took it.
func (b *batch) stickyTimer(ctx context.Context, e *store.Execution, at wftTimerAttrs, again map[string]wftTimerAttrs) {
	state := stickyNotTaken
	if b.stickyState != nil {
		state = b.stickyState(ctx, e, at.TaskID)
	}
	switch state {
	case stickyTaken:
		at.Checks++
		b.workflowTaskDeadline(e.ExecutionID, at, min(stickyTimeout<<min(at.Checks, 16), maxStickyCheck))
	case stickyDone:
		at.Sticky, at.Checks = false, 0
		b.workflowTaskDeadline(e.ExecutionID, at, b.wftTimeout)
	default:
		if b.debug {
			b.logFor(e.ExecutionID).Debug("sticky workflow task not taken by its worker: moving it to every worker", "task_id", at.TaskID, "worker", e.StickyWorker)
		}
		b.writes.StickyMoved++
		e.StickyWorker = ""
		b.changed[e.ExecutionID] = true
		at.Sticky, at.Checks = false, 0
		at.Redispatch++
		again[e.ExecutionID] = at
	}
}
