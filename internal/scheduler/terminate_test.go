package scheduler

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func terminateCmd(executionID, reason string) wire.Command {
	return wire.Command{CommandID: dedup.TerminateCommandID(executionID), Kind: wire.KindTerminate,
		Terminate: &wire.TerminateCommand{ExecutionID: executionID, Reason: reason}}
}

// TestTerminateAppliesOnce: a termination closes a running execution as
// Terminated with one WorkflowTerminated event and tells workers; applied
// again, redelivered or repeated, it changes nothing and answers the
// status; an unknown execution is 404; a cancellation after it changes
// nothing either.
func TestTerminateAppliesOnce(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	w := applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: startCmd("onboarding", "", "w1")}})
	require.Len(t, w.NewExecutions, 1)
	id := w.NewExecutions[0].ExecutionID

	term := seqCommand{seq: 2, cmd: terminateCmd(id, "stuck")}
	require.True(t, validCommand(&term.cmd))
	w = applyOnce(t, db, "a", l, []seqCommand{term})
	out := outcomeOf(t, w, term.cmd.CommandID)
	require.Equal(t, wire.KindTerminate, out.Kind)
	require.Equal(t, wire.StatusTerminated, out.Status)
	require.Equal(t, id, out.ExecutionID)
	require.Equal(t, "w1", out.WorkflowID)
	require.Empty(t, out.Error)
	require.Len(t, w.Outbox, 1, "the workers are told")
	require.Equal(t, broker.CancelledSubject(id), w.Outbox[0].Subject)
	require.Equal(t, "terminate:"+id, w.Outbox[0].MsgID)
	e, err := store.GetExecution(t.Context(), db, id)
	require.NoError(t, err)
	require.Equal(t, wire.StatusTerminated, e.Status)
	require.NotNil(t, e.ClosedAt)
	require.JSONEq(t, `{"type": "Terminated", "message": "stuck"}`, string(e.Error))
	terminated := `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'WorkflowTerminated'`
	require.Equal(t, 1, count(t, db, terminated, id))
	require.Equal(t, 1, count(t, db, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'WorkflowTerminated' AND attrs->>'reason' = 'stuck'`, id))

	// The same message again: already applied.
	w = applyOnce(t, db, "a", l, []seqCommand{term})
	require.Empty(t, w.Outcomes)
	// The command again (after the broker's window), a cancellation, and
	// a termination of an unknown execution.
	again := seqCommand{seq: 3, cmd: terminateCmd(id, "again")}
	cancel := seqCommand{seq: 4, cmd: wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: id}}}
	unknown := seqCommand{seq: 5, cmd: terminateCmd(placement.MintExecutionID(4, l.Shard), "")}
	w = applyOnce(t, db, "a", l, []seqCommand{again, cancel, unknown})
	require.Equal(t, wire.StatusTerminated, outcomeOf(t, w, again.cmd.CommandID).Status)
	require.Equal(t, wire.StatusTerminated, outcomeOf(t, w, cancel.cmd.CommandID).Status)
	missing := outcomeOf(t, w, unknown.cmd.CommandID)
	require.Equal(t, 404, missing.HTTPStatus)
	require.Equal(t, "execution_not_found", missing.Error)
	require.Empty(t, w.Events)
	require.Empty(t, w.Outbox)
	require.Equal(t, 1, count(t, db, terminated, id))

	require.False(t, validCommand(&wire.Command{Kind: wire.KindTerminate}))
	// An id that is no execution's is answered 404, not set aside
	// (TestCommandsForNoExecutionAreNotFound).
	require.True(t, validCommand(&wire.Command{Kind: wire.KindTerminate, Terminate: &wire.TerminateCommand{ExecutionID: "nope"}}))
}
