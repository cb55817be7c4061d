package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/store"
)

// taskHeaderRoom is what a task message's headers (its Nats-Msg-Id)
// take of NATS's max payload.
const taskHeaderRoom = 512

// maxTask is the largest task payload nc's server carries.
func maxTask(nc *nats.Conn) int {
	if mp := nc.MaxPayload(); mp > taskHeaderRoom {
		return int(mp) - taskHeaderRoom
	}
	return 0
}

// taskSeq is where the task stream holds an execution's outstanding
// workflow task.
type taskSeq struct {
	taskID int
	seq    uint64
}

// trackTask records the stream sequence JetStream acknowledged for an
// outbox row, if the row is a workflow task.
func (r *runner) trackTask(row *store.OutboxMsg, ack *jetstream.PubAck) {
	if ack == nil {
		return
	}
	if id, taskID, ok := parseWorkflowTaskMsgID(row.MsgID); ok {
		r.tasks[id] = taskSeq{taskID: taskID, seq: ack.Sequence}
	}
}

// forgetTasks drops what trackTask recorded of workflow tasks that
// completed, and of executions that closed.
func (r *runner) forgetTasks(w *store.Writes) {
	for _, ref := range w.WorkflowTasksDone {
		if t, ok := r.tasks[ref.ExecutionID]; ok && t.taskID <= ref.TaskID {
			delete(r.tasks, ref.ExecutionID)
		}
	}
	for _, id := range w.ExecutionsClosed {
		delete(r.tasks, id)
	}
}

// taskQueued says whether the task stream still holds the workflow task
// taskID of execution e: its message is in the stream until a worker
// acknowledges it, after publishing the task's result. Unknown (the task
// was published by an earlier runner) counts as not held, so a lost task
// is dispatched again; a stream that cannot be asked counts as held, so
// nothing is dispatched again while NATS is away.
func (r *runner) taskQueued(ctx context.Context, e *store.Execution, taskID int) bool {
	t, ok := r.tasks[e.ExecutionID]
	if !ok || t.taskID != taskID {
		return false
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	st, err := r.taskStream(ctx)
	if err == nil {
		_, err = st.GetMsg(ctx, t.seq)
	}
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return false
	}
	if err != nil {
		logattr.With(r.log, e.ExecutionID, e.WorkflowName, "").Warn("look up a workflow task in the task stream", "task_id", taskID, "err", err)
	}
	return true
}

// taskStream is the task stream's handle, looked up once per runner.
func (r *runner) taskStream(ctx context.Context) (jetstream.Stream, error) {
	if r.taskStr != nil {
		return r.taskStr, nil
	}
	st, err := r.s.cfg.Topology.JS.Stream(ctx, broker.TaskStream)
	if err != nil {
		return nil, fmt.Errorf("look up stream %s: %w", broker.TaskStream, err)
	}
	r.taskStr = st
	return st, nil
}
