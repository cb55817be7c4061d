package scheduler

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestCommandsForNoExecutionAreNotFound: a signal, cancellation or
// termination whose execution id is not in the canonical form (another
// spelling of a running execution's UUID, or no UUID at all) names no
// execution: it is answered 404 execution_not_found, like one for an
// execution that does not exist, and is neither applied to the execution
// nor set aside as a dead command.
func TestCommandsForNoExecutionAreNotFound(t *testing.T) {
	t.Parallel()
	db, l := leasedDB(t)
	w := applyOnce(t, db, "a", l, []seqCommand{{seq: 1, cmd: startCmd("onboarding", "", "w1")}})
	require.Len(t, w.NewExecutions, 1)
	id := w.NewExecutions[0].ExecutionID

	cancel := func(executionID string) wire.Command {
		return wire.Command{CommandID: dedup.NewID(), Kind: wire.KindCancel, Cancel: &wire.CancelCommand{ExecutionID: executionID}}
	}
	ids := []string{
		strings.ToUpper(id), "urn:uuid:" + id, "{" + id + "}", strings.ReplaceAll(id, "-", ""),
		"zzzzzzzz-zzzz-zzzz-zzzz-zzzzzzzzzzzz", "not-a-uuid", "",
		placement.MintExecutionID(4, l.Shard), // canonical, and no execution's
	}
	var cmds []seqCommand
	for _, other := range ids {
		for _, cmd := range []wire.Command{signalCmd(other, ""), signalCmd(other, "k-"+other), cancel(other), terminateCmd(other, "")} {
			require.True(t, validCommand(&cmd), "%s %q", cmd.Kind, other)
			cmds = append(cmds, seqCommand{seq: uint64(len(cmds) + 2), cmd: cmd})
		}
	}
	w = applyOnce(t, db, "a", l, cmds)
	require.Empty(t, w.DeadCommands)
	require.Empty(t, w.Events)
	for _, c := range cmds {
		out := outcomeOf(t, w, c.cmd.CommandID)
		require.Equal(t, 404, out.HTTPStatus, "%s %q", c.cmd.Kind, c.cmd.TargetExecution())
		require.Equal(t, api.CodeExecutionNotFound, out.Error)
	}
	e, err := store.GetExecution(t.Context(), db, id)
	require.NoError(t, err)
	require.Equal(t, wire.StatusRunning, e.Status)
	require.Zero(t, count(t, db, `SELECT count(*) FROM dead_commands`))

	require.True(t, validUUID(id))
	require.False(t, validUUID(strings.ToUpper(id)), "the canonical form is lower case")
}
