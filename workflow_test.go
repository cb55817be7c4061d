package harvest

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Every workflow goroutine ends with its execution: none outlives the
// tests.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func ev(t testing.TB, seq int, typ string, attrs any) wire.Event {
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
	s := newSim(t, registered(twoSteps), 41)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 1, ActivityName: "a", Input: json.RawMessage(`41`)}}, withoutOptions(t, s.task()))

	// a is scheduled but not done: nothing new to decide.
	require.Empty(t, s.task())

	s.complete(1, 100)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 2, ActivityName: "b", Input: json.RawMessage(`101`)}}, withoutOptions(t, s.task()))

	s.complete(2, "done")
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"done"`)}}, s.task())
}

// TestAHistoryWithoutTaskEventsReplays: a history written before
// WorkflowTaskCompleted existed replays as Harvest's first replayer did
// it: each run of decision events is a task that saw what came before.
func TestAHistoryWithoutTaskEventsReplays(t *testing.T) {
	t.Parallel()
	opts := wire.ActivityOptions{Retry: wire.DefaultRetryPolicy()}
	history := []wire.Event{
		ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{Input: json.RawMessage(`41`)}),
		ev(t, 2, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 1, ActivityName: "a", Input: json.RawMessage(`41`), Options: opts}),
		ev(t, 3, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: 1, ActivityName: "a", Attempt: 1, Result: json.RawMessage(`100`)}),
	}
	d, err := runWorkflowTask(registered(twoSteps), &wire.WorkflowTask{TaskID: 2, History: history}, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionScheduleActivity, ActivityID: 2, ActivityName: "b", Input: json.RawMessage(`101`)}}, withoutOptions(t, d))

	// Then a scheduler that records tasks: the next task's history mixes
	// both.
	history = append(history,
		ev(t, 4, wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: 2, BaseSeq: 3}),
		ev(t, 5, wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: 2, ActivityName: "b", Input: json.RawMessage(`101`), Options: opts}),
		ev(t, 6, wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: 2, ActivityName: "b", Attempt: 1, Result: json.RawMessage(`"done"`)}))
	d, err = runWorkflowTask(registered(twoSteps), &wire.WorkflowTask{TaskID: 3, History: history}, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"done"`)}}, d)
}

func TestReplayActivityFailureReachesWorkflow(t *testing.T) {
	t.Parallel()
	var got error
	s := newSim(t, registered(func(ctx *WorkflowContext, in int) (int, error) {
		got = ExecuteActivity(ctx, "a", in).Get(nil)
		return 0, got
	}), 1)
	s.task()
	s.fail(1, wire.Failure{Message: "card declined", Type: "Declined"})
	d := s.task()
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
	require.Equal(t, "github.com/harvest-engine/harvest.ActivityError", d[0].Failure.Type,
		"a workflow returning the *ActivityError fails with its type, not the activity's error's (docs/activities.md)")
}

// TestReplayNamesWhereItDiverged: code that asks for another activity
// than its history records fails the task with ErrNonDeterministic,
// saying at which event, what the history had and what the code asked
// for; so does a changed input, or a decision more or less.
func TestReplayNamesWhereItDiverged(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(func(ctx *WorkflowContext, in int) (int, error) {
		return 0, ExecuteActivity(ctx, "a", in).Get(nil)
	}), 7)
	s.task()
	_, err := s.replay(registered(func(ctx *WorkflowContext, in int) (int, error) {
		return 0, ExecuteActivity(ctx, "other", in).Get(nil)
	}))
	require.ErrorIs(t, err, ErrNonDeterministic)
	var nd *NonDeterminismError
	require.ErrorAs(t, err, &nd)
	require.Equal(t, 3, nd.Seq, "started, task completed, then the activity")
	require.Equal(t, 1, nd.TaskID)
	require.Contains(t, nd.History, `ActivityScheduled {"activity_id":1,"activity_name":"a"`)
	require.Contains(t, nd.Code, `"activity_name":"other"`)

	_, err = s.replay(registered(func(ctx *WorkflowContext, in int) (int, error) {
		return 0, ExecuteActivity(ctx, "a", in+1).Get(nil)
	}))
	require.ErrorIs(t, err, ErrNonDeterministic, "another input")
	_, err = s.replay(registered(func(ctx *WorkflowContext, in int) (int, error) {
		return 0, ExecuteActivity(ctx, "a", in, ActivityOptions{StartToClose: time.Minute}).Get(nil)
	}))
	require.ErrorIs(t, err, ErrNonDeterministic, "other options")
	_, err = s.replay(registered(func(ctx *WorkflowContext, in int) (int, error) {
		ExecuteActivity(ctx, "a", in)
		return 0, ExecuteActivity(ctx, "b", in).Get(nil)
	}))
	require.ErrorAs(t, err, &nd, "a decision more")
	require.Equal(t, "nothing more", nd.History)
	_, err = s.replay(registered(func(ctx *WorkflowContext, in int) (int, error) {
		return 0, NewSignal[int]("go").Channel(ctx).Receive(nil)
	}))
	require.ErrorAs(t, err, &nd, "a decision less")
	require.Equal(t, "nothing", nd.Code)
}

func TestReplayParallelActivitiesAndPanic(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		f1 := ExecuteActivity(ctx, "a", 1)
		f2 := ExecuteActivity(ctx, "b", 2)
		_ = f1.Get(nil)
		return 0, f2.Get(nil)
	}), nil)
	require.Len(t, s.task(), 2, "both activities are scheduled in one task")

	_, err := newSim(t, registered(func(*WorkflowContext, struct{}) (int, error) { panic("boom") }), nil).tryTask()
	require.ErrorContains(t, err, "boom")
}

func TestActivityOptionsResolve(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		return 0, ExecuteActivity(ctx, "charge", nil, ActivityOptions{RetryPolicy: RetryExponential(3, 2*time.Second)}).Get(nil)
	}), nil)
	s.opts = map[string]ActivityOptions{"charge": {StartToClose: 30 * time.Second, RetryPolicy: &RetryPolicy{MaximumAttempts: 9}}}
	d := s.task()
	o := d[0].Options
	require.EqualValues(t, 30000, o.StartToCloseMS, "from the registration")
	require.Equal(t, 3, o.Retry.MaximumAttempts, "the call overrides the policy")
	require.Equal(t, []time.Duration{2 * time.Second, 4 * time.Second}, []time.Duration{o.Retry.Delay(1), o.Retry.Delay(2)})
	require.False(t, o.Retry.Retries(3, "", false), "then failure")
	require.Equal(t, 2*time.Second, RetryExponential(3, 2*time.Second).Delay(1))
}
