package decide_test

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestImposedIsOnlyTheSchedulersOwnClose: a WorkflowFailed a
// fail_workflow decision records is a decision's, even of a failure type
// the scheduler uses; one the scheduler recorded on its own carries a
// reason, and is not.
func TestImposedIsOnlyTheSchedulersOwnClose(t *testing.T) {
	t.Parallel()
	event := func(typ string, attrs any) wire.Event {
		raw, err := json.Marshal(attrs)
		require.NoError(t, err)
		return wire.Event{Seq: 9, Type: typ, Attrs: raw}
	}
	f := &wire.Failure{Type: "HistoryLimitExceeded", Message: "mine"}
	rec, err := decide.Record(decide.KeysOf("e", nil), &wire.Decision{Type: wire.DecisionFailWorkflow, Failure: f}, time.Now())
	require.NoError(t, err)
	require.False(t, decide.Imposed(event(rec.Event, rec.Attrs)))
	require.True(t, decide.Imposed(event(wire.EventWorkflowFailed, wire.WorkflowClosedAttrs{Failure: f, Reason: "history limit exceeded"})))
	require.False(t, decide.Imposed(event(wire.EventWorkflowTerminated, wire.WorkflowClosedAttrs{Reason: "terminated"})),
		"not a decision's type at all")
}
