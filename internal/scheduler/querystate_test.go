package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// stateCommands are a run whose tasks set query states, given its
// execution id: task 1 sets progress and phase; a signal; task 2 sets
// progress again (and two states no SDK would send: a name that is no
// name, a value PostgreSQL cannot store), schedules an activity it ran
// eagerly, and carries the speculative task 3, which sets progress once
// more; then task 2's result again, stale.
func stateCommands(id string) []wire.Command {
	task2 := &wire.WorkflowTaskResult{ExecutionID: id, TaskID: 2, BaseSeq: 3,
		Decisions: []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "act", Input: json.RawMessage(`{}`)}},
		Eager:     []wire.ActivityResult{{ExecutionID: id, ActivityID: 1, Attempt: 1, Result: json.RawMessage(`"ok"`)}},
		States: []wire.StateValue{{Name: "progress", Value: json.RawMessage(`{"n":2}`)}, {Name: "bad.name", Value: json.RawMessage(`1`)},
			{Name: "nul", Value: json.RawMessage(`"\u0000"`)}},
		Next: &wire.WorkflowTaskResult{ExecutionID: id, TaskID: 3, BaseSeq: 6,
			States: []wire.StateValue{{Name: "progress", Value: json.RawMessage(`{"n":3}`)}}},
	}
	return []wire.Command{
		{CommandID: "wft-1", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: id, TaskID: 1, BaseSeq: 1,
			States: []wire.StateValue{{Name: "progress", Value: json.RawMessage(`{"n":1}`)}, {Name: "phase", Value: json.RawMessage(`"a"`)}}}},
		{CommandID: "sig-1", Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "go"}},
		{CommandID: "wft-2", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: task2},
		{CommandID: "wft-2-again", Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: task2},
	}
}

// TestQueryStatesAreUpsertedAtTheirTasksSeq: each state a workflow task
// sets is stored in the apply's transaction with the seq of the task's
// WorkflowTaskCompleted, the last value of a batch winning (task 2 and
// its speculative task 3 in one command, one statement); states no SDK
// would send are dropped without failing the batch, a stale result
// changes nothing, and no state is history. The in-memory shard the test
// kit runs on keeps the same.
func TestQueryStatesAreUpsertedAtTheirTasksSeq(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, l := leasedDB(t)
	w := applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: startCmd("stateful", "", "s-1")}})
	id := w.NewExecutions[0].ExecutionID
	cmds := stateCommands(id)
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 2, cmd: cmds[0]}})
	require.Len(t, w.States, 2)
	st, err := store.GetStates(ctx, db, id, "")
	require.NoError(t, err)
	require.Equal(t, wire.StatusRunning, st.Status)
	require.Equal(t, "stateful", st.WorkflowName)
	require.Len(t, st.States, 2)
	require.Equal(t, "phase", st.States[0].Name, "by name")
	require.Equal(t, 2, st.States[0].Seq, "the seq of task 1's WorkflowTaskCompleted")
	require.JSONEq(t, `{"n":1}`, string(st.States[1].Value))
	require.Equal(t, 2, st.States[1].Seq)

	// The signal, then task 2 with its speculative task 3, then task 2's
	// result again: one batch.
	applyOnce(t, db, "a", l, []seqCommand{{seq: 3, cmd: cmds[1]}})
	w = applyOnce(t, db, "a", l, []seqCommand{{seq: 4, cmd: cmds[2]}, {seq: 5, cmd: cmds[3]}})
	require.Len(t, w.States, 2, "task 2's progress and task 3's; the two refused ones dropped")
	hist, err := store.GetHistory(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowTaskCompleted, wire.EventSignalReceived, wire.EventWorkflowTaskCompleted,
		wire.EventActivityScheduled, wire.EventActivityCompleted, wire.EventWorkflowTaskCompleted}, types(hist), "states are no history")
	st, err = store.GetStates(ctx, db, id, "progress")
	require.NoError(t, err)
	require.Len(t, st.States, 1)
	require.JSONEq(t, `{"n":3}`, string(st.States[0].Value), "the speculative task's, the batch's last")
	require.Equal(t, 7, st.States[0].Seq, "task 3's WorkflowTaskCompleted")
	st, err = store.GetStates(ctx, db, id, "phase")
	require.NoError(t, err)
	require.Equal(t, 2, st.States[0].Seq, "unchanged since task 1")
	require.Equal(t, 2, count(t, db, `SELECT count(*) FROM execution_states WHERE execution_id = $1`, id))
	st, err = store.GetStates(ctx, db, id, "never")
	require.NoError(t, err)
	require.Empty(t, st.States, "the execution is found, the state is not")
	_, err = store.GetStates(ctx, db, "01a2398e-0000-7000-8000-000000000000", "progress")
	require.ErrorIs(t, err, store.ErrExecutionNotFound)

	// The in-memory shard: the same commands, the same states.
	m, err := NewMemory(MemoryConfig{})
	require.NoError(t, err)
	now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
	start := startCmd("stateful", "", "s-1")
	d, err := m.Apply(ctx, now, &start)
	require.NoError(t, err)
	mid := d.WorkflowTasks[0].ExecutionID
	for _, c := range stateCommands(mid) {
		_, err := m.Apply(ctx, now, &c)
		require.NoError(t, err)
	}
	var got []string
	for _, s := range m.States(mid) {
		got = append(got, fmt.Sprintf("%s=%s@%d", s.Name, s.Value, s.Seq))
	}
	require.Equal(t, []string{`phase="a"@2`, `progress={"n":3}@7`}, got)
}
