package workerrt_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// attempts records what each attempt of a test activity saw.
type attempts struct {
	mu   sync.Mutex
	seen []seenAttempt
}

type seenAttempt struct {
	attempt int
	key     string
}

func (a *attempts) add(ctx *harvest.ActivityContext) int {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.seen = append(a.seen, seenAttempt{ctx.Attempt(), ctx.IdempotencyKey().String()})
	return len(a.seen)
}

func (a *attempts) all() []seenAttempt {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]seenAttempt(nil), a.seen...)
}

type retryCase struct {
	fail func(ctx *harvest.ActivityContext, n int) error
	opts harvest.ActivityOptions
}

// retryStack registers workflow "retry_<name>" for each case: it runs the
// case's activity once and fails with the activity's error, if any.
func retryStack(t *testing.T, cases map[string]retryCase) (*devstack.Stack, map[string]*attempts) {
	t.Helper()
	seen := map[string]*attempts{}
	for name := range cases {
		seen[name] = &attempts{}
	}
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		for name, c := range cases {
			act := "act_" + name
			harvest.RegisterActivity(w, act, func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
				n := seen[name].add(ctx)
				if err := c.fail(ctx, n); err != nil {
					return "", err
				}
				return "ok", nil
			}, c.opts)
			harvest.RegisterWorkflow(w, "retry_"+name, func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				var out string
				err := harvest.ExecuteActivity(ctx, act, nil).Get(&out)
				var ae *harvest.ActivityError
				if errors.As(err, &ae) {
					return "", harvest.NewError(ae.Type, "after %d attempts: %s", ae.Attempts, ae.Message)
				}
				return out, err
			})
		}
	}})
	return s, seen
}

func TestActivityRetries(t *testing.T) {
	t.Parallel()
	fast := harvest.RetryExponential(3, 50*time.Millisecond)
	s, seen := retryStack(t, map[string]retryCase{
		"flaky": {fail: func(_ *harvest.ActivityContext, n int) error {
			if n < 3 {
				return errors.New("provider unavailable")
			}
			return nil
		}, opts: harvest.ActivityOptions{RetryPolicy: fast}},
		"exhausted": {fail: func(*harvest.ActivityContext, int) error { return harvest.NewError("Unavailable", "still down") },
			opts: harvest.ActivityOptions{RetryPolicy: fast}},
		"nonretryable": {fail: func(*harvest.ActivityContext, int) error {
			return harvest.NewNonRetryableError("ValidationFailed", "amount must be positive")
		}, opts: harvest.ActivityOptions{RetryPolicy: fast}},
		"listed": {fail: func(*harvest.ActivityContext, int) error { return harvest.NewError("Declined", "card declined") },
			opts: harvest.ActivityOptions{RetryPolicy: &harvest.RetryPolicy{MaximumAttempts: 5, InitialInterval: 50 * time.Millisecond, NonRetryableErrorTypes: []string{"Declined"}}}},
		"panics": {fail: func(*harvest.ActivityContext, int) error { panic("boom") },
			opts: harvest.ActivityOptions{RetryPolicy: harvest.RetryExponential(2, 50*time.Millisecond)}},
		"timeout": {fail: func(ctx *harvest.ActivityContext, _ int) error { <-ctx.Done(); return ctx.Err() },
			opts: harvest.ActivityOptions{StartToClose: 300 * time.Millisecond, RetryPolicy: harvest.RetryExponential(2, 50*time.Millisecond)}},
	})
	ids := map[string]string{}
	for _, name := range []string{"flaky", "exhausted", "nonretryable", "listed", "panics", "timeout"} {
		a := stacktest.StartWorkflow(t, s, "retry_"+name, "", `{}`)
		require.Equal(t, 201, a.Status, a.Body)
		ids[name] = a.Body["execution_id"].(string)
	}

	// A flaky activity succeeds on its third attempt, with one key throughout.
	exec := stacktest.WaitCompleted(t, s, ids["flaky"])
	require.Equal(t, "ok", exec["result"])
	got := seen["flaky"].all()
	require.Len(t, got, 3)
	for i, a := range got {
		require.Equal(t, i+1, a.attempt)
		require.Equal(t, got[0].key, a.key, "the same key for every attempt")
	}
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"}, stacktest.HistoryTypes(t, s, ids["flaky"]))

	failedWith := func(name string) string {
		e := stacktest.WaitStatus(t, s, ids[name], "Failed")
		return e["error"].(map[string]any)["message"].(string) + " [" + e["error"].(map[string]any)["type"].(string) + "]"
	}
	require.Contains(t, failedWith("exhausted"), "after 3 attempts")
	require.Len(t, seen["exhausted"].all(), 3)
	require.Contains(t, failedWith("nonretryable"), "after 1 attempts")
	require.Contains(t, failedWith("nonretryable"), "[ValidationFailed]")
	require.Len(t, seen["nonretryable"].all(), 1)
	require.Contains(t, failedWith("listed"), "[Declined]")
	require.Len(t, seen["listed"].all(), 1, "a listed type is not retried")
	require.Contains(t, failedWith("panics"), "[panic]")
	require.Len(t, seen["panics"].all(), 2, "a panic is retryable")
	require.Contains(t, failedWith("timeout"), "[StartToCloseTimeout]")
	require.Len(t, seen["timeout"].all(), 2)

	// The panic's stack is in the ActivityFailed event.
	h := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+ids["panics"]+"/history", nil, "")
	for _, e := range h.Body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "ActivityFailed" {
			require.Contains(t, ev["failure"].(map[string]any)["stack"], "goroutine")
		}
	}
}

func TestHeartbeatsAndReconcile(t *testing.T) {
	t.Parallel()
	var (
		mu      sync.Mutex
		effects = map[string]string{} // the downstream system, by key
		calls   int
		seen    []string
	)
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		// "stalls" heartbeats once, then goes silent until the next attempt
		// starts; the next attempt reads its details.
		harvest.RegisterActivity(w, "stalls", func(ctx *harvest.ActivityContext, _ struct{}) (int, error) {
			if ctx.Attempt() == 1 {
				ctx.Heartbeat(map[string]int{"progress": 41})
				// Going silent cancels the attempt's context.
				<-ctx.Done()
				return 0, ctx.Err()
			}
			var d map[string]int
			ok, err := ctx.HeartbeatDetails(&d)
			if !ok || err != nil {
				return 0, errors.New("no details from the first attempt")
			}
			return d["progress"] + 1, nil
		}, harvest.ActivityOptions{HeartbeatTimeout: 400 * time.Millisecond, RetryPolicy: harvest.RetryExponential(3, 50*time.Millisecond)})
		// "steady" runs well past its heartbeat timeout, heartbeating.
		harvest.RegisterActivity(w, "steady", func(ctx *harvest.ActivityContext, _ struct{}) (int, error) {
			for i := range 40 {
				ctx.Heartbeat(i)
				select {
				case <-ctx.Done():
					return 0, ctx.Err()
				case <-time.After(100 * time.Millisecond): // the work being done
				}
			}
			return ctx.Attempt(), nil
		}, harvest.ActivityOptions{HeartbeatTimeout: 1500 * time.Millisecond})
		// "effect" does its effect, then overruns its deadline before
		// reporting: the next attempt reconciles instead of repeating it.
		harvest.RegisterActivity(w, "effect", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			mu.Lock()
			calls++
			effects[ctx.IdempotencyKey().String()] = "done-" + ctx.IdempotencyKey().String()[:8]
			mu.Unlock()
			<-ctx.Done()
			return "", ctx.Err()
		}, harvest.ActivityOptions{StartToClose: 300 * time.Millisecond, RetryPolicy: harvest.RetryExponential(3, 50*time.Millisecond)})
		harvest.RegisterReconcile(w, "effect", func(ctx *harvest.ActivityContext, _ struct{}) (string, bool, error) {
			mu.Lock()
			defer mu.Unlock()
			seen = append(seen, fmt.Sprintf("attempt %d unknown=%v", ctx.Attempt(), ctx.Info().PreviousOutcomeUnknown))
			v, ok := effects[ctx.IdempotencyKey().String()]
			return v, ok, nil
		})
		for _, act := range []string{"stalls", "steady", "effect"} {
			harvest.RegisterWorkflow(w, "run_"+act, func(ctx *harvest.WorkflowContext, _ struct{}) (any, error) {
				var out any
				return out, harvest.ExecuteActivity(ctx, act, nil).Get(&out)
			})
		}
	}})
	stalls := stacktest.StartWorkflow(t, s, "run_stalls", "", `{}`).Body["execution_id"].(string)
	steady := stacktest.StartWorkflow(t, s, "run_steady", "", `{}`).Body["execution_id"].(string)
	effect := stacktest.StartWorkflow(t, s, "run_effect", "", `{}`).Body["execution_id"].(string)

	t.Cleanup(func() {
		if t.Failed() {
			for _, id := range []string{stalls, steady, effect} {
				h := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
				t.Logf("history of %s: %v", id, h.Body)
			}
		}
	})
	require.EqualValues(t, 42, stacktest.WaitCompleted(t, s, stalls)["result"], "attempt 2 read attempt 1's details")
	require.EqualValues(t, 1, stacktest.WaitCompleted(t, s, steady)["result"], "heartbeats kept attempt 1 alive")
	exec := stacktest.WaitCompleted(t, s, effect)
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, 1, calls, "the effect ran once")
	require.Len(t, effects, 1)
	for _, v := range effects {
		require.Equal(t, v, exec["result"], "the reconciled result is the activity's")
	}
	require.Equal(t, []string{"attempt 2 unknown=true"}, seen)
}

func TestScheduleToCloseBoundsAllAttempts(t *testing.T) {
	t.Parallel()
	s, seen := retryStack(t, map[string]retryCase{
		"hangs": {fail: func(ctx *harvest.ActivityContext, _ int) error { <-ctx.Done(); return ctx.Err() },
			opts: harvest.ActivityOptions{StartToClose: 10 * time.Second, ScheduleToClose: 300 * time.Millisecond}},
		"keepsfailing": {fail: func(*harvest.ActivityContext, int) error { return errors.New("down") },
			opts: harvest.ActivityOptions{ScheduleToClose: 500 * time.Millisecond, RetryPolicy: harvest.RetryExponential(100, 100*time.Millisecond)}},
	})
	hangs := stacktest.StartWorkflow(t, s, "retry_hangs", "", `{}`).Body["execution_id"].(string)
	failing := stacktest.StartWorkflow(t, s, "retry_keepsfailing", "", `{}`).Body["execution_id"].(string)
	e := stacktest.WaitStatus(t, s, hangs, "Failed")
	require.Equal(t, "ScheduleToCloseTimeout", e["error"].(map[string]any)["type"])
	require.Len(t, seen["hangs"].all(), 1, "the attempt's deadline is the schedule-to-close one; no retry after it")
	stacktest.WaitStatus(t, s, failing, "Failed")
	n := len(seen["keepsfailing"].all())
	require.GreaterOrEqual(t, n, 2)
	require.Less(t, n, 10, "retries stop at the schedule-to-close bound, long before 100 attempts")
}

func TestCancellingAWorkflowCancelsItsActivities(t *testing.T) {
	t.Parallel()
	t.Run("eager", func(t *testing.T) {
		t.Parallel()
		// The attempt runs on the worker that scheduled it, holding the
		// workflow task: the request cancels it, the task reports it
		// failed, and the next task, which sees the request, gives the
		// activity up.
		testCancellingCancelsActivities(t, false, nil)
	})
	t.Run("dispatched", func(t *testing.T) {
		t.Parallel()
		testCancellingCancelsActivities(t, true, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled",
			"WorkflowCancelRequested", "WorkflowTaskCompleted", "ActivityCancelRequested", "ActivityCancelled", "WorkflowTaskCompleted", "WorkflowCancelled"})
	})
}

func testCancellingCancelsActivities(t *testing.T, disableEager bool, history []string) {
	running := make(chan struct{}, 1)
	stopped := make(chan error, 1)
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{DisableEagerActivities: disableEager}, Register: func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "long_work", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			// Never block the worker on the test's channels.
			select {
			case running <- struct{}{}:
			default:
			}
			<-ctx.Done()
			select {
			case stopped <- ctx.Err():
			default:
			}
			return "", ctx.Err()
		}, harvest.ActivityOptions{StartToClose: time.Minute})
		harvest.RegisterWorkflow(w, "long", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			var out string
			return out, harvest.ExecuteActivity(ctx, "long_work", nil).Get(&out)
		})
	}})
	id := stacktest.StartWorkflow(t, s, "long", "", `{}`).Body["execution_id"].(string)
	select {
	case <-running:
	case <-time.After(30 * time.Second):
		t.Fatal("the activity never started")
	}
	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/cancel", nil, `{"reason": "customer left"}`)
	require.Equal(t, 200, r.Status, r.Body)
	require.Equal(t, "Running", r.Body["status"], "the workflow code is told, and closes it")
	require.Equal(t, true, r.Body["cancel_requested"])
	select {
	case err := <-stopped:
		require.ErrorIs(t, err, context.Canceled)
	case <-time.After(30 * time.Second):
		t.Fatal("the activity's context was not cancelled")
	}
	stacktest.WaitStatus(t, s, id, "Cancelled")
	got := stacktest.HistoryTypes(t, s, id)
	if history != nil {
		require.Equal(t, history, got)
	} else {
		require.Contains(t, got, "WorkflowCancelRequested")
		require.Contains(t, got, "ActivityCancelRequested")
		require.Equal(t, "WorkflowCancelled", got[len(got)-1])
	}
	again := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+id+"/cancel", nil, ``)
	require.Equal(t, 200, again.Status)
	require.Equal(t, "Cancelled", again.Body["status"], "cancelling again changes nothing")
	require.Equal(t, 404, stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/01a23712-0000-7000-8000-000000000000/cancel", nil, ``).Status)
	// A cancelled run may be replaced under allow_duplicate_failed_only.
	wid := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["workflow_id"].(string)
	anew := stacktest.StartWorkflow(t, s, "long", "", `{"workflow_id": "`+wid+`", "reuse_policy": "allow_duplicate_failed_only"}`)
	require.Equal(t, 201, anew.Status, anew.Body)
	// Its activity waits for cancellation too: cancel it, so the stack
	// stops within its grace.
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+anew.Body["execution_id"].(string)+"/cancel", nil, ``)
	require.Equal(t, 200, r.Status, r.Body)
}

func TestAStoppingWorkerHandsItsAttemptsBack(t *testing.T) {
	t.Parallel()
	started := make(chan int, 4)
	register := func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "handback_work", func(ctx *harvest.ActivityContext, _ struct{}) (bool, error) {
			started <- ctx.Attempt()
			if ctx.Attempt() == 1 {
				<-ctx.Done() // still running when its worker stops
				return false, ctx.Err()
			}
			return ctx.Info().PreviousOutcomeUnknown, nil
		}, harvest.ActivityOptions{StartToClose: time.Minute, RetryPolicy: harvest.RetryExponential(3, 50*time.Millisecond)})
		harvest.RegisterWorkflow(w, "handback", func(ctx *harvest.WorkflowContext, _ struct{}) (bool, error) {
			var out bool
			return out, harvest.ExecuteActivity(ctx, "handback_work", nil).Get(&out)
		})
	}
	s := stacktest.Start(t, devstack.Config{Register: register})
	begun := time.Now()
	id := stacktest.StartWorkflow(t, s, "handback", "", `{}`).Body["execution_id"].(string)
	require.Equal(t, 1, <-started)

	// A second worker joins; the first stops with a short grace period.
	other, err := harvest.NewWorker(harvest.WorkerConfig{NATS: s.NC()})
	require.NoError(t, err)
	register(other)
	require.NoError(t, other.Start(context.Background()))
	t.Cleanup(func() { _ = other.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	require.Error(t, s.Worker().Stop(ctx), "the attempt outlived the grace period")

	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, true, exec["result"], "the next attempt knew the first's outcome was unknown")
	require.Less(t, time.Since(begun), 30*time.Second, "handed back, not left to its one-minute timeout")
}
