package harvest

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// steps are decisions as "type [name] id", to compare what a task
// decided, ids included.
func steps(ds []wire.Decision) []string {
	out := make([]string, len(ds))
	for i, d := range ds {
		switch d.Type {
		case wire.DecisionScheduleActivity:
			out[i] = fmt.Sprintf("%s %s %d", d.Type, d.ActivityName, d.ActivityID)
		case wire.DecisionRequestCancelActivity:
			out[i] = fmt.Sprintf("%s %d", d.Type, d.ActivityID)
		case wire.DecisionStartTimer, wire.DecisionCancelTimer:
			out[i] = fmt.Sprintf("%s %d", d.Type, d.TimerID)
		default:
			out[i] = d.Type
		}
	}
	return out
}

// saga reserves, charges and ships; cancelled, it undoes the steps it
// completed, last first, with a context the cancellation does not reach,
// and returns the cancellation.
func saga(ctx *WorkflowContext, _ struct{}) (string, error) {
	type step struct{ do, undo string }
	var done []step
	for _, s := range []step{{"reserve", "release"}, {"charge", "refund"}, {"ship", "recall"}} {
		if err := ExecuteActivity(ctx, s.do, nil).Get(nil); err != nil {
			dctx := NewDisconnectedContext(ctx)
			for i := len(done) - 1; i >= 0; i-- {
				if cerr := ExecuteActivity(dctx, done[i].undo, nil).Get(nil); cerr != nil {
					return "", errors.Join(err, cerr)
				}
			}
			return "", err
		}
		done = append(done, s)
	}
	return "shipped", nil
}

// TestACancelledSagaCompensatesTheStepsItCompleted: cancelled while each
// step runs, the saga gives that step up and compensates exactly the
// steps before it, then closes Cancelled; every task is decided alike on
// a replay and on the cached execution, and a replay of the whole
// history matches it.
func TestACancelledSagaCompensatesTheStepsItCompleted(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		completed     int
		compensations []string
	}{
		{0, nil},
		{1, []string{"schedule_activity release 3"}},
		{2, []string{"schedule_activity refund 4", "schedule_activity release 5"}},
	} {
		t.Run(fmt.Sprintf("after %d steps", tc.completed), func(t *testing.T) {
			t.Parallel()
			s := newSim(t, registered(saga), nil)
			s.task()
			for id := 1; id <= tc.completed; id++ {
				s.complete(id, nil)
				s.task()
			}
			s.cancel("customer asked")
			pending := tc.completed + 1
			// The step in flight is given up; its Future waits for its
			// attempt's end, which comes without a result.
			d := s.task()
			require.Equal(t, []string{fmt.Sprintf("%s %d", wire.DecisionRequestCancelActivity, pending)}, steps(d))
			s.activityCancelled(pending)
			d = s.task()
			want := []string{wire.DecisionCancelWorkflow}
			if len(tc.compensations) > 0 {
				want = tc.compensations[:1]
			}
			require.Equal(t, want, steps(d))
			require.True(t, s.cached, "the task ran on the cached execution too")
			for i := range tc.compensations {
				s.complete(pending+1+i, nil)
				d = s.task()
				if i+1 < len(tc.compensations) {
					require.Equal(t, tc.compensations[i+1:i+2], steps(d))
				}
			}
			require.Equal(t, wire.DecisionCancelWorkflow, d[len(d)-1].Type)
			closed := s.cancelled()
			require.Equal(t, &wire.Failure{Type: "Cancelled", Message: fmt.Sprintf(`activity %q canceled: customer asked`, []string{"reserve", "charge", "ship"}[pending-1])}, closed.Failure)
			require.Empty(t, closed.Result)
			_, err := s.replay(registered(saga))
			require.NoError(t, err, "a replay of the whole history matches it")
		})
	}
}

// TestAStepGivenUpThatCompletedAfterAllIsUndone: the attempt of the step
// in flight completes after the request gave it up: the Future shows its
// result, and the saga undoes it with the others.
func TestAStepGivenUpThatCompletedAfterAllIsUndone(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(saga), nil)
	s.task()
	s.complete(1, nil)
	s.task()
	s.cancel("customer asked")
	require.Equal(t, []string{"request_cancel_activity 2"}, steps(s.task()))
	s.complete(2, nil) // charged after all
	require.Equal(t, []string{"schedule_activity refund 4"}, steps(s.task()), "charge completed: it is refunded")
	s.complete(4, nil)
	require.Equal(t, []string{"schedule_activity release 5"}, steps(s.task()))
	s.complete(5, nil)
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(s.task()))
	_, err := s.replay(registered(saga))
	require.NoError(t, err)
}

// TestACancelSeenWithAResultSpendsTheNextActivitysID: the request seen in
// the same task as a step's result: the next step is not scheduled, but
// its id is spent, so that the compensation's id does not depend on when
// the request came.
func TestACancelSeenWithAResultSpendsTheNextActivitysID(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(saga), nil)
	s.task()
	s.complete(1, nil)
	s.cancel("")
	require.Equal(t, []string{"schedule_activity release 3"}, steps(s.task()), "reserve's result came first: no activity to give up, charge never scheduled")
	s.complete(3, nil)
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(s.task()))
	require.Equal(t, "Cancelled", s.cancelled().Failure.Type)
	require.Equal(t, `activity "charge" canceled`, s.cancelled().Failure.Message)
}

// TestTheCancelDecisionsAreTakenAtTheBoundaryAndReplay: the task that
// first sees the request gives up the pending activity and timer of the
// connected context (activities first, each by id), not the disconnected
// context's timer; the next task (on the cached execution, and on a
// replay) finds those decisions in the history and goes on.
func TestTheCancelDecisionsAreTakenAtTheBoundaryAndReplay(t *testing.T) {
	t.Parallel()
	var errs []error
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		dctx := NewDisconnectedContext(ctx)
		short := NewTimer(ctx, time.Second)
		slow := ExecuteActivity(ctx, "slow", nil)
		keep := NewTimer(dctx, time.Minute)
		long := NewTimer(ctx, time.Hour)
		if err := short.Wait(); err != nil {
			return "", err
		}
		errs = []error{slow.Get(nil), long.Wait()}
		if err := ExecuteActivity(dctx, "cleanup", nil).Get(nil); err != nil {
			return "", err
		}
		if err := keep.Wait(); err != nil {
			return "", err
		}
		return "cleaned up", errs[0]
	})
	s := newSim(t, fn, nil)
	require.Equal(t, []string{"start_timer 1", "schedule_activity slow 1", "start_timer 2", "start_timer 3"}, steps(s.task()))
	s.fire(1)
	require.Empty(t, s.task())
	// The request arrives while a task runs: the next one sees it.
	require.Empty(t, s.task(func() { s.cancel("stop") }))
	d := s.task()
	require.Equal(t, []string{"request_cancel_activity 1", "cancel_timer 3"}, steps(d), "slow's Future waits for its attempt's end")
	s.activityCancelled(1)
	d = s.task()
	require.Equal(t, []string{"schedule_activity cleanup 2"}, steps(d))
	require.True(t, s.cached)
	require.Len(t, errs, 2)
	for _, err := range errs {
		require.True(t, IsCanceled(err), "%v", err)
		var ce *CanceledError
		require.ErrorAs(t, err, &ce)
		require.Equal(t, "stop", ce.Reason)
	}
	require.EqualError(t, errs[1], "timer 3 canceled: stop")

	// The history as the scheduler recorded it.
	n := len(s.hist)
	require.Equal(t, []string{wire.EventWorkflowTaskCompleted, wire.EventActivityCancelRequested, wire.EventTimerCancelled, wire.EventActivityCancelled,
		wire.EventWorkflowTaskCompleted, wire.EventActivityScheduled},
		[]string{s.hist[n-6].Type, s.hist[n-5].Type, s.hist[n-4].Type, s.hist[n-3].Type, s.hist[n-2].Type, s.hist[n-1].Type})
	// long's firing, recorded before the scheduler applied the
	// cancellation, changes nothing.
	s.fire(3)
	s.complete(2, nil)
	require.Empty(t, s.task(), "the disconnected timer still runs")
	require.True(t, s.cached)
	_, err := s.replay(fn)
	require.NoError(t, err, "a fresh replay matches the decisions the request caused")
	s.fire(2)
	d = s.task()
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(d))
	require.Equal(t, "Cancelled", d[0].Failure.Type, "the workflow returned the activity's canceled error")
	require.JSONEq(t, `null`, string(orNull(d[0].Result)), "an error is the close, not the result")
	_, err = s.replay(fn)
	require.NoError(t, err)
}

func orNull(raw json.RawMessage) json.RawMessage {
	if len(raw) == 0 {
		return json.RawMessage(`null`)
	}
	return raw
}

// TestDoneInASelectorAndErr: a Selector wakes on ctx.Done once the
// request is visible, Err says so (with the reason), a goroutine's
// context is cancelled with its parent's, and a disconnected context is
// not.
func TestDoneInASelectorAndErr(t *testing.T) {
	t.Parallel()
	var errs []error
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]string, error) {
		var got []string
		Go(ctx, func(ctx *WorkflowContext) {
			ctx.Done().Receive()
			got = append(got, "goroutine saw done")
		})
		dctx := NewDisconnectedContext(ctx)
		Go(dctx, func(ctx *WorkflowContext) {
			ctx.Done().Receive()
			panic("a disconnected context's Done is never ready")
		})
		sig := GetSignalChannel(ctx, "go")
		for ctx.Err() == nil {
			NewSelector(ctx).
				AddReceive(sig, func(c *SignalChannel) { _ = c.Receive(nil); got = append(got, "signal") }).
				AddChannel(ctx.Done(), func() { got = append(got, "done") }).
				Select()
		}
		errs = []error{ctx.Err(), dctx.Err()}
		got = append(got, fmt.Sprint(ctx.Done().IsReady(), dctx.Done().IsReady()))
		return got, nil
	})
	s := newSim(t, fn, nil)
	require.Empty(t, s.task())
	s.signal("go", nil)
	require.Empty(t, s.task())
	s.cancel("enough")
	d := s.task()
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(d))
	require.JSONEq(t, `["signal","done","true false"]`, string(d[0].Result), "the workflow returned before the goroutine ran again")
	require.True(t, IsCanceled(errs[0]))
	require.EqualError(t, errs[0], "workflow canceled: enough")
	require.NoError(t, errs[1])
	require.JSONEq(t, `["signal","done","true false"]`, string(s.cancelled().Result))
}

// TestBlockingCallsReturnCanceledErrors: a signal's Receive (once no
// signal waits), ReceiveWithTimeout, Await, AwaitWithTimeout and Sleep
// return canceled errors once the request is visible, their timers
// cancelled; made then, with a connected context, they decide nothing.
func TestBlockingCallsReturnCanceledErrors(t *testing.T) {
	t.Parallel()
	item := NewSignal[string]("item")
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]string, error) {
		results := map[string]error{}
		wait := func(name string, call func(ctx *WorkflowContext) error) {
			Go(ctx, func(ctx *WorkflowContext) { results[name] = call(ctx) })
		}
		wait("receive", func(ctx *WorkflowContext) error { return GetSignalChannel(ctx, "never").Receive(nil) })
		wait("receive_with_timeout", func(ctx *WorkflowContext) error {
			_, ok, err := NewSignal[string]("other").ReceiveWithTimeout(ctx, time.Hour)
			require.False(t, ok)
			return err
		})
		wait("await", func(ctx *WorkflowContext) error { return Await(ctx, func() bool { return false }) })
		wait("await_with_timeout", func(ctx *WorkflowContext) error {
			ok, err := AwaitWithTimeout(ctx, time.Hour, func() bool { return false })
			require.False(t, ok)
			return err
		})
		wait("sleep", func(ctx *WorkflowContext) error { return Sleep(ctx, time.Hour) })
		if err := Await(NewDisconnectedContext(ctx), func() bool { return len(results) == 5 }); err != nil {
			return nil, err
		}
		// A signal that waits is received first; then the receive fails.
		pending, err := item.Receive(ctx)
		if err != nil {
			return nil, err
		}
		_, err = item.Receive(ctx)
		results["receive_after"] = err
		// Made after the request, with the connected context: nothing
		// is decided, and ids are spent.
		results["sleep_after"] = Sleep(ctx, time.Minute)
		_, results["receive_with_timeout_after"] = GetSignalChannel(ctx, "never").ReceiveWithTimeout(ctx, time.Minute, nil)
		_, results["await_with_timeout_after"] = AwaitWithTimeout(ctx, time.Minute, func() bool { return false })
		results["activity_after"] = ExecuteActivity(ctx, "a", nil).Get(nil)
		if err := Sleep(NewDisconnectedContext(ctx), time.Second); err != nil {
			return nil, err
		}
		out := []string{pending}
		for _, name := range slices.Sorted(maps.Keys(results)) {
			out = append(out, fmt.Sprintf("%s %v", name, IsCanceled(results[name])))
		}
		return out, nil
	})
	s := newSim(t, fn, nil)
	require.Equal(t, []string{"start_timer 1", "start_timer 2", "start_timer 3"}, steps(s.task()), "the waits with a timeout, and the sleep")
	s.cancel("")
	s.signal("item", "kept")
	require.Equal(t, []string{"cancel_timer 1", "cancel_timer 2", "cancel_timer 3", "start_timer 5"}, steps(s.task()),
		"timer 4 (the second Sleep) is spent without a decision; the disconnected Sleep starts timer 5")
	s.fire(5)
	d := s.task()
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(d))
	var got []string
	require.NoError(t, json.Unmarshal(d[0].Result, &got))
	require.Equal(t, []string{"kept", "activity_after true", "await true", "await_with_timeout true", "await_with_timeout_after true",
		"receive true", "receive_after true", "receive_with_timeout true", "receive_with_timeout_after true", "sleep true", "sleep_after true"}, got)
	_, err := s.replay(fn)
	require.NoError(t, err)
}

// TestAWorkflowThatIgnoresTheCancelClosesCancelledWithItsResult: whatever
// the code returns once it saw the request closes the execution
// Cancelled: its result, or its error (continuing as new included), as
// the failure; a canceled error's failure is of type Cancelled.
func TestAWorkflowThatIgnoresTheCancelClosesCancelledWithItsResult(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, how string) (string, error) {
		err := ExecuteActivity(ctx, "a", nil).Get(nil)
		switch how {
		case "result":
			return "ignored", nil
		case "continue":
			return "", ContinueAsNew(ctx, "again")
		case "wrapped":
			return "", fmt.Errorf("step a: %w", err)
		}
		return "", NewError("Mine", "gave up")
	})
	for how, want := range map[string]wire.Decision{
		"result":   {Type: wire.DecisionCancelWorkflow, Result: json.RawMessage(`"ignored"`)},
		"continue": {Type: wire.DecisionCancelWorkflow, Failure: &wire.Failure{Type: errorType(&ContinueAsNewError{}), Message: "continue as new"}},
		"wrapped":  {Type: wire.DecisionCancelWorkflow, Failure: &wire.Failure{Type: "Cancelled", Message: `step a: activity "a" canceled: why`}},
		"error":    {Type: wire.DecisionCancelWorkflow, Failure: &wire.Failure{Type: "Mine", Message: "Mine: gave up"}},
	} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s := newSim(t, fn, how)
			s.task()
			s.cancel("why")
			require.Equal(t, []wire.Decision{{Type: wire.DecisionRequestCancelActivity, ActivityID: 1}}, s.task())
			s.activityCancelled(1)
			require.Equal(t, []wire.Decision{want}, s.task())
			_, err := s.replay(fn)
			require.NoError(t, err)
		})
	}
	// Without a request, nothing changes.
	s := newSim(t, fn, "result")
	s.task()
	s.complete(1, nil)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"ignored"`)}}, s.task())
}

// TestACancelSeenWithTheStartStartsTheCodeCancelled: a request the first
// task sees with WorkflowStarted: the function starts with its context
// cancelled.
func TestACancelSeenWithTheStartStartsTheCodeCancelled(t *testing.T) {
	t.Parallel()
	var err error
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		require.True(t, IsCanceled(ctx.Err()))
		err = ExecuteActivity(ctx, "work", nil).Get(nil)
		if err := ExecuteActivity(NewDisconnectedContext(ctx), "note", nil).Get(nil); err != nil {
			return "", err
		}
		return "", err
	})
	s := newSim(t, fn, nil)
	s.cancel("too soon")
	require.Equal(t, []string{"schedule_activity note 2"}, steps(s.task()), "work decided nothing; its id is spent")
	require.EqualError(t, err, `activity "work" canceled: too soon`)
	s.complete(2, nil)
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(s.task()))
	require.Equal(t, &wire.Failure{Type: "Cancelled", Message: `activity "work" canceled: too soon`}, s.cancelled().Failure)
	_, rerr := s.replay(fn)
	require.NoError(t, rerr)
}

// TestATimerCancelledByTheContextIsReadyInASelector: the Selector wakes
// on a timer the cancellation cancelled, whose Wait says so, and on a
// future it gave up; Timer.Cancel's Wait returns a canceled error too.
func TestATimerCancelledByTheContextIsReadyInASelector(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]string, error) {
		var got []string
		mine := NewTimer(ctx, time.Second)
		mine.Cancel()
		got = append(got, fmt.Sprint(IsCanceled(mine.Wait())))
		timer := NewTimer(ctx, time.Hour)
		f := ExecuteActivity(ctx, "a", nil)
		onTimer := func(t *Timer) { got = append(got, "timer "+fmt.Sprint(IsCanceled(t.Wait()))) }
		onFuture := func(f *Future) { got = append(got, "future "+fmt.Sprint(IsCanceled(f.Get(nil)))) }
		NewSelector(ctx).AddTimer(timer, onTimer).AddFuture(f, onFuture).Select()
		NewSelector(ctx).AddFuture(f, onFuture).Select()
		return got, nil
	})
	s := newSim(t, fn, nil)
	require.Equal(t, []string{"start_timer 1", "cancel_timer 1", "start_timer 2", "schedule_activity a 1"}, steps(s.task()))
	s.cancel("")
	require.Equal(t, []string{"request_cancel_activity 1", "cancel_timer 2"}, steps(s.task()))
	s.activityCancelled(1)
	d := s.task()
	require.Equal(t, []string{wire.DecisionCancelWorkflow}, steps(d))
	// The timer, given up at once, was ready first.
	require.JSONEq(t, `["true", "timer true", "future true"]`, string(d[0].Result))
}

// TestAnUpdateHandlerSeesTheCancel: an update's handler runs on the
// execution, and its waits with its context are cancelled as the rest.
func TestAnUpdateHandlerSeesTheCancel(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		answered := false
		if err := SetUpdateHandler(ctx, "wait", func(ctx *WorkflowContext, _ struct{}) (string, error) {
			defer func() { answered = true }()
			return "slept", Sleep(ctx, time.Hour)
		}); err != nil {
			return "", err
		}
		if err := Await(NewDisconnectedContext(ctx), func() bool { return answered }); err != nil {
			return "", err
		}
		return "", ctx.Err()
	})
	s := newSim(t, fn, nil)
	s.task()
	s.taskID++
	ran, err := s.cache.run(fn, &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", TaskID: s.taskID,
		History: s.hist, Time: s.now, Updates: []wire.UpdateRequest{{UpdateID: "u1", Name: "wait"}}}, nil)
	require.NoError(t, err)
	require.Equal(t, []string{wire.DecisionAcceptUpdate, "start_timer 1"}, steps(ran.Decisions))
	s.record(len(s.hist), ran.Decisions)
	s.cancel("")
	d := s.task()
	require.Equal(t, []string{"cancel_timer 1", wire.DecisionCompleteUpdate, wire.DecisionCancelWorkflow}, steps(d))
	require.Equal(t, "Cancelled", d[1].Update.Failure.Type)
	require.Equal(t, &wire.Failure{Type: "Cancelled", Message: "workflow canceled"}, d[2].Failure)
	_, err = s.replay(fn)
	require.NoError(t, err)
}
