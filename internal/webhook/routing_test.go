package webhook_test

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestPointerAndExpand(t *testing.T) {
	t.Parallel()
	var doc any
	require.NoError(t, json.Unmarshal([]byte(`{"data": {"object": {"id": "pi_1", "amount": 500, "lines": [{"sku": "a/b"}], "a~b": 1}}}`), &doc))
	v, err := webhook.Pointer(doc, "/data/object/id")
	require.NoError(t, err)
	require.Equal(t, "pi_1", v)
	v, err = webhook.Pointer(doc, "/data/object/lines/0/sku")
	require.NoError(t, err)
	require.Equal(t, "a/b", v)
	v, err = webhook.Pointer(doc, "/data/object/a~0b")
	require.NoError(t, err)
	require.EqualValues(t, 1, v)
	_, err = webhook.Pointer(doc, "/data/missing")
	require.ErrorIs(t, err, webhook.ErrPointer)
	_, err = webhook.Pointer(doc, "/data/object/lines/7")
	require.ErrorIs(t, err, webhook.ErrPointer)

	s, err := webhook.Expand(doc, "order-{/data/object/id}-{/data/object/amount}")
	require.NoError(t, err)
	require.Equal(t, "order-pi_1-500", s)
	_, err = webhook.Expand(doc, "x-{/data/object}")
	require.Error(t, err)
	_, err = webhook.Expand(doc, "x-{/data")
	require.Error(t, err)
}

// TestACommandsWorkflowIDMustBeAnIdentifier: a workflow_id template that
// selects a control character makes no command; the error wraps the
// storable.Error, so ingest can answer invalid_workflow_id.
func TestACommandsWorkflowIDMustBeAnIdentifier(t *testing.T) {
	t.Parallel()
	rule := webhook.Rule{Event: "e", Workflow: "w", Signal: "s", WorkflowID: "order-{/id}"}
	var event any
	require.NoError(t, json.Unmarshal([]byte(`{"id": "a\nb"}`), &event))
	_, _, err := rule.Command(placement.Single(4), "", "hook:src:1", event, time.Now())
	var se *storable.Error
	require.ErrorAs(t, err, &se)
	require.Equal(t, storable.ProblemControl, se.Problem)
	require.ErrorContains(t, err, `workflow_id "order-a\nb" of template "order-{/id}" holds the control character U+000A`)

	require.NoError(t, json.Unmarshal([]byte(`{"id": "a b"}`), &event))
	cmd, _, err := rule.Command(placement.Single(4), "", "hook:src:1", event, time.Now())
	require.NoError(t, err)
	require.Equal(t, "order-a b", cmd.Start.WorkflowID)

	// Blank, empty or over 256 bytes, as the API refuses them from a
	// caller (found by FuzzRuleCommand: a blank one was published).
	for _, c := range []struct{ template, id string }{
		{" ", "x"}, {"{/id}", ""}, {"{/id}", " \t"}, {"order-{/id}", strings.Repeat("x", 251)},
	} {
		rule := webhook.Rule{Event: "e", Workflow: "w", Signal: "s", WorkflowID: c.template}
		_, _, err := rule.Command(placement.Single(4), "", "hook:src:1", map[string]any{"id": c.id}, time.Now())
		require.ErrorIs(t, err, webhook.ErrWorkflowID, "template %q, id %q", c.template, c.id)
	}
	rule.WorkflowID = "{/id}"
	cmd, _, err = rule.Command(placement.Single(4), "", "hook:src:1", map[string]any{"id": strings.Repeat("x", 256)}, time.Now())
	require.NoError(t, err, "256 bytes is the limit")
	require.Len(t, cmd.Start.WorkflowID, 256)
}

// TestARulesStartGoesToTheTaskQueueGiven: a rule's start, or
// signal-with-start, goes to the task queue of its workflow's
// configuration; none given is the default queue.
func TestARulesStartGoesToTheTaskQueueGiven(t *testing.T) {
	t.Parallel()
	event := map[string]any{"id": "o-1"}
	for _, rule := range []webhook.Rule{
		{Event: "e", Workflow: "w"},
		{Event: "e", Workflow: "w", Signal: "s", WorkflowID: "order-{/id}"},
	} {
		cmd, _, err := rule.Command(placement.Single(4), "mine", "hook:src:1", event, time.Now())
		require.NoError(t, err)
		require.Equal(t, "mine", cmd.Start.TaskQueue, "signal %q", rule.Signal)
		cmd, _, err = rule.Command(placement.Single(4), "", "hook:src:1", event, time.Now())
		require.NoError(t, err)
		require.Equal(t, wire.DefaultTaskQueue, cmd.Start.TaskQueue, "signal %q", rule.Signal)
	}
}
