package harvest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The public API's rule for options (CONTRIBUTING.md, "Options in the
// public API"): an optional options struct is a trailing variadic
// parameter of which at most one is given; should several be, they merge
// in order, each one's non-zero fields winning.

// TestSeveralActivityOptionsMerge: at registration and per call, a later
// ActivityOptions' non-zero fields win, and its zero fields leave the
// earlier ones' as they were.
func TestSeveralActivityOptionsMerge(t *testing.T) {
	t.Parallel()
	w := newWorker(WorkerConfig{}.WithDefaults())
	RegisterActivity(w, "charge_card", func(*ActivityContext, struct{}) (struct{}, error) { return struct{}{}, nil },
		ActivityOptions{StartToClose: time.Minute, TaskQueue: "cards"}, ActivityOptions{StartToClose: 2 * time.Minute, HeartbeatTimeout: time.Second})
	require.Equal(t, ActivityOptions{StartToClose: 2 * time.Minute, HeartbeatTimeout: time.Second, TaskQueue: "cards"}, w.activityOptions["charge_card"])

	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (struct{}, error) {
		ExecuteActivity(ctx, "charge_card", nil, ActivityOptions{ScheduleToClose: time.Hour, TaskQueue: "a"}, ActivityOptions{TaskQueue: "b"})
		return struct{}{}, nil
	}), nil)
	d := s.task()
	require.Equal(t, int64(time.Hour/time.Millisecond), d[0].Options.ScheduleToCloseMS)
	require.Equal(t, "b", d[0].Options.TaskQueue)
}

// TestWorkflowOptionsAndTheirOldForm: WorkflowOptions.InputSchema
// registers the schema, as the deprecated WithInputSchema, which returns
// the struct, still does.
func TestWorkflowOptionsAndTheirOldForm(t *testing.T) {
	t.Parallel()
	const sch = `{"type": "object"}`
	wf := func(*WorkflowContext, struct{}) (struct{}, error) { return struct{}{}, nil }
	w := newWorker(WorkerConfig{}.WithDefaults())
	RegisterWorkflow(w, "typed", wf, WorkflowOptions{InputSchema: []byte(sch)})
	RegisterWorkflow(w, "old", wf, WithInputSchema([]byte(sch))) //nolint:staticcheck // SA1019: the deprecated form's own test.
	RegisterWorkflow(w, "none", wf, WorkflowOptions{InputSchema: []byte(sch)}, WorkflowOptions{})
	require.Empty(t, w.regErrs)
	for _, name := range []string{"typed", "old", "none"} {
		require.NotNil(t, w.schemas[name], name)
		require.JSONEq(t, sch, string(w.schemas[name].Raw()), name)
	}
	require.Equal(t, WorkflowOptions{InputSchema: []byte(sch)}, WithInputSchema([]byte(sch))) //nolint:staticcheck // SA1019: as above.
}
