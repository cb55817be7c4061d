package harvest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

func ev(t *testing.T, seq int, typ string, attrs any) wire.Event {
	t.Helper()
	raw, err := json.Marshal(attrs)
	require.NoError(t, err)
	return wire.Event{Seq: seq, Type: typ, Attrs: raw}
}

// twoSteps runs activity a then activity b, feeding a's result to b.
func twoSteps(ctx *WorkflowContext, in int) (string, error) {
	var a int
	if err := ExecuteActivity(ctx, "a", in).Get(&a); err != nil {
		return "", err
	}
	var b string
	if err := ExecuteActivity(ctx, "b", a+1).Get(&b); err != nil {
		return "", err
	}
	return b, nil
}

func registered[In, Out any](fn func(*WorkflowContext, In) (Out, error)) workflowFunc {
	return func(ctx *WorkflowContext, raw json.RawMessage) (any, error) {
		in, err := decodeInput[In](raw)
		if err != nil {
			return nil, err
		}
		return fn(ctx, in)
	}
}

// withoutOptions checks that scheduled activities carry resolved options
// (the default retry policy here), then drops them for comparison.
func withoutOptions(t *testing.T, d []wire.Decision) []wire.Decision {
	t.Helper()
	for i := range d {
		if d[i].Type == wire.DecisionScheduleActivity {
			require.NotNil(t, d[i].Options)
			require.Equal(t, wire.DefaultRetryPolicy(), d[i].Options.Retry)
			d[i].Options = nil
		}
	}
	return d
}

func TestReplayStepByStep(t *testing.T) {
	t.Parallel()
	fn := registered(twoSteps)
	started := ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{Input: json.RawMessage(`41`)})
	task := &wire.WorkflowTask{History: []wire.Event{started}}

	d, err := runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "a", Input: json.RawMessage(`41`)}}, withoutOptions(t, d))

	// a is scheduled but not done: nothing new to decide.
	task.History = append(task.History, ev(t, 2, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 1, ActivityName: "a"}))
	d, err = runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	require.Empty(t, d)

	task.History = append(task.History, ev(t, 3, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: 1, ActivityName: "a", Result: json.RawMessage(`100`)}))
	d, err = runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 2, ActivityName: "b", Input: json.RawMessage(`101`)}}, withoutOptions(t, d))

	task.History = append(task.History,
		ev(t, 4, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 2, ActivityName: "b"}),
		ev(t, 5, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: 2, ActivityName: "b", Result: json.RawMessage(`"done"`)}))
	d, err = runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"done"`)}}, d)
}

func TestReplayActivityFailureReachesWorkflow(t *testing.T) {
	t.Parallel()
	task := &wire.WorkflowTask{History: []wire.Event{
		ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{Input: json.RawMessage(`1`)}),
		ev(t, 2, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 1, ActivityName: "a"}),
		ev(t, 3, wire.EventActivityFailed, wire.ActivityClosedAttrs{ActivityID: 1, ActivityName: "a", Attempt: 1, Failure: &wire.Failure{Message: "card declined", Type: "Declined"}}),
	}}
	var got error
	fn := registered(func(ctx *WorkflowContext, in int) (int, error) {
		got = ExecuteActivity(ctx, "a", in).Get(nil)
		return 0, got
	})
	d, err := runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	var ae *ActivityError
	require.True(t, errors.As(got, &ae))
	require.Equal(t, "Declined", ae.Type)
	require.Equal(t, 1, ae.Attempts)
	var cause *ApplicationError
	require.ErrorAs(t, got, &cause)
	require.Equal(t, "card declined", cause.Message)
	require.Len(t, d, 1)
	require.Equal(t, wire.DecisionFailWorkflow, d[0].Type)
	require.Contains(t, d[0].Failure.Message, "card declined")
}

func TestReplayDetectsNonDeterminism(t *testing.T) {
	t.Parallel()
	task := &wire.WorkflowTask{History: []wire.Event{
		ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{}),
		ev(t, 2, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 1, ActivityName: "a"}),
	}}
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		return 0, ExecuteActivity(ctx, "other", nil).Get(nil)
	})
	_, err := runWorkflowTask(fn, task, nil)
	require.ErrorIs(t, err, ErrNonDeterministic)
}

func TestReplayParallelActivitiesAndPanic(t *testing.T) {
	t.Parallel()
	task := &wire.WorkflowTask{History: []wire.Event{ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})}}
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		f1 := ExecuteActivity(ctx, "a", 1)
		f2 := ExecuteActivity(ctx, "b", 2)
		_ = f1.Get(nil)
		return 0, f2.Get(nil)
	})
	d, err := runWorkflowTask(fn, task, nil)
	require.NoError(t, err)
	require.Len(t, d, 2, "both activities are scheduled in one task")

	_, err = runWorkflowTask(registered(func(*WorkflowContext, struct{}) (int, error) { panic("boom") }), task, nil)
	require.ErrorContains(t, err, "boom")
}

func TestActivityOptionsResolve(t *testing.T) {
	t.Parallel()
	task := &wire.WorkflowTask{History: []wire.Event{ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})}}
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		return 0, ExecuteActivity(ctx, "charge", nil, ActivityOptions{RetryPolicy: RetryExponential(3, 2*time.Second)}).Get(nil)
	})
	registration := map[string]ActivityOptions{"charge": {StartToClose: 30 * time.Second, RetryPolicy: &RetryPolicy{MaximumAttempts: 9}}}
	d, err := runWorkflowTask(fn, task, registration)
	require.NoError(t, err)
	o := d[0].Options
	require.EqualValues(t, 30000, o.StartToCloseMS, "from the registration")
	require.Equal(t, 3, o.Retry.MaximumAttempts, "the call overrides the policy")
	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, []time.Duration{o.Retry.Delay(1), o.Retry.Delay(2)})
	require.False(t, o.Retry.Retries(3, "", false), "then failure")
	require.Equal(t, 2*time.Second, RetryExponential(3, 2*time.Second).Delay(1))
}
