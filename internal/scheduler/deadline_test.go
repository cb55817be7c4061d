package scheduler

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestALostWorkflowTaskIsDispatchedAgain: a workflow task not completed
// by its deadline is left alone while the task stream holds it (no worker
// has taken it yet); once a worker took it and acknowledged it but its
// result never came (the stranded execution of a broker restart), it is
// dispatched again under a fresh message id, marked as redispatched, and
// its result completes the execution and clears the deadline.
func TestALostWorkflowTaskIsDispatchedAgain(t *testing.T) {
	t.Parallel()
	db, js, top := oneShard(t)
	ctx := natstest.Context(t)
	startScheduler(t, Config{DB: db, Topology: top, WorkflowTaskTimeout: 300 * time.Millisecond})

	cons, err := js.CreateConsumer(ctx, broker.TaskStream, jetstream.ConsumerConfig{
		Durable: "test_worker", AckPolicy: jetstream.AckExplicitPolicy, AckWait: time.Minute,
		FilterSubject: broker.NameTaskSubject(wire.DefaultTaskQueue, wire.TaskWorkflow, "onboarding"),
	})
	require.NoError(t, err)
	cmd := startCmd("onboarding", "k-deadline", "wf-deadline")
	_, err = top.PublishCommand(ctx, 0, &cmd)
	require.NoError(t, err)
	probe.Until(t, 20*time.Second, "the first workflow task", func() bool {
		info, err := cons.Info(ctx)
		return err == nil && info.NumPending == 1
	})
	var exec string
	require.NoError(t, db.QueryRow(ctx, `SELECT execution_id::text FROM executions`).Scan(&exec))

	// Queued, no worker: past several deadlines, it is looked at, not
	// dispatched again.
	probe.Until(t, 20*time.Second, "the deadline to be looked at twice", func() bool {
		var checks int
		err := db.QueryRow(ctx, `SELECT coalesce((attrs->>'checks')::int, 0) FROM timers WHERE execution_id = $1 AND kind = 'workflow_task'`, exec).Scan(&checks)
		return err == nil && checks >= 2
	})
	info, err := cons.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, info.NumPending, "a queued task is not dispatched again")

	// A worker takes it and acknowledges it, and its result is lost.
	batch, err := cons.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	var first jetstream.Msg
	for m := range batch.Messages() {
		first = m
	}
	require.NotNil(t, first)
	require.NoError(t, first.DoubleAck(ctx))

	var again wire.WorkflowTask
	probe.Until(t, 60*time.Second, "the task to be dispatched again", func() bool {
		batch, err := cons.Fetch(1, jetstream.FetchMaxWait(time.Second))
		if err != nil {
			return false
		}
		for m := range batch.Messages() {
			require.NoError(t, json.Unmarshal(m.Data(), &again))
			require.Equal(t, "wft:"+exec+":1:r1", m.Headers().Get(jetstream.MsgIDHeader))
			require.NoError(t, m.Ack())
			return true
		}
		return false
	})
	require.Equal(t, 1, again.TaskID, "the same task")
	require.Equal(t, 1, again.Redispatch)
	require.Equal(t, []string{wire.EventWorkflowStarted}, eventTypes(again.History))

	done := wire.Command{CommandID: dedup.WorkflowTaskCommandID(exec, 1), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: exec, TaskID: 1, BaseSeq: 1, Decisions: []wire.Decision{
			{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 3_600_000}}}}
	_, err = top.PublishCommand(ctx, 0, &done)
	require.NoError(t, err)
	probe.Until(t, 20*time.Second, "the result to apply", func() bool {
		return count(t, db, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'TimerStarted'`, exec) == 1
	})
	require.Zero(t, count(t, db, `SELECT count(*) FROM timers WHERE execution_id = $1 AND kind = $2`, exec, store.TimerWorkflowTask),
		"the completed task's deadline is gone")
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM timers WHERE execution_id = $1`, exec), "the workflow's own timer stays")
}

func eventTypes(evs []wire.Event) []string {
	out := make([]string, 0, len(evs))
	for _, ev := range evs {
		out = append(out, ev.Type)
	}
	return out
}

func TestWorkflowTaskMessageIDsParse(t *testing.T) {
	t.Parallel()
	id := dedup.NewID()
	for _, n := range []int{0, 1, 7} {
		got, task, ok := parseWorkflowTaskMsgID(workflowTaskMsgID(id, 42, n))
		require.True(t, ok)
		require.Equal(t, id, got)
		require.Equal(t, 42, task)
	}
	for _, bad := range []string{"", "wft:", "act:" + id + ":1:1", "wft:" + id + ":x", "cancel:" + id} {
		_, _, ok := parseWorkflowTaskMsgID(bad)
		require.False(t, ok, bad)
	}
}
