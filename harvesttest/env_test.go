package harvesttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/harvesttest"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

// newEnv returns an Env running the example workflows on svc.
func newEnv(t *testing.T, svc *examples.Services) *harvesttest.Env {
	t.Helper()
	env, err := harvesttest.New(func(w *harvest.Worker) { examples.Register(w, svc) }, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	return env
}

func countEvents(t *testing.T, x *harvesttest.Execution, typ string) int {
	t.Helper()
	events, err := x.History()
	require.NoError(t, err)
	n := 0
	for _, ev := range events {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

var charge = examples.ChargeInput{AmountCents: 1250, CustomerID: "cus_1"}

// registerOne registers activity name, and a workflow of the same name
// that runs it once with its input and returns its result.
func registerOne[In, Out any](w *harvest.Worker, name string, fn func(*harvest.ActivityContext, In) (Out, error), opts ...harvest.ActivityOptions) {
	harvest.RegisterWorkflow(w, name, func(ctx *harvest.WorkflowContext, in In) (Out, error) {
		var out Out
		err := harvest.ExecuteActivity(ctx, name, in).Get(&out)
		return out, err
	})
	harvest.RegisterActivity(w, name, fn, opts...)
}

func TestDuplicateStartResolvesToTheFirstExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	env := newEnv(t, svc)

	first, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.False(t, first.Deduplicated)
	again, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.True(t, again.Deduplicated)
	require.Equal(t, first.ID, again.ID)

	require.Equal(t, 1, countEvents(t, first, "WorkflowStarted"))
	require.Len(t, env.Attempts(), 1)
	require.Equal(t, 1, svc.Payments.Charges())
	status, err := first.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, status)
}

func TestDuplicateSignalIsDeliveredOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())

	x, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 2})
	require.NoError(t, err)
	delivered, err := x.Signal(ctx, "item", "a", harvesttest.SignalOptions{IdempotencyKey: "item-a"})
	require.NoError(t, err)
	require.True(t, delivered)
	delivered, err = x.Signal(ctx, "item", "a", harvesttest.SignalOptions{IdempotencyKey: "item-a"})
	require.NoError(t, err)
	require.False(t, delivered, "a keyed signal delivered twice is a duplicate")
	require.Equal(t, 1, countEvents(t, x, "SignalReceived"))
	require.ErrorIs(t, x.Result(nil), harvesttest.ErrNotClosed, "one item is not two")

	_, err = x.Signal(ctx, "item", "b", harvesttest.SignalOptions{IdempotencyKey: "item-b"})
	require.NoError(t, err)
	var out examples.CollectResult
	require.NoError(t, x.Result(&out))
	require.Len(t, out.Items, 2)
	require.JSONEq(t, `"a"`, string(out.Items[0]))
	require.JSONEq(t, `"b"`, string(out.Items[1]))

	_, err = x.Signal(ctx, "item", "c", harvesttest.SignalOptions{IdempotencyKey: "item-c"})
	require.ErrorIs(t, err, client.ErrExecutionTerminal)
}

func TestLostActivityResultReconciles(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	env := newEnv(t, svc)

	env.Inject(harvesttest.LoseActivityResult(examples.ActivityChargeCard))
	x, err := env.Start(ctx, examples.WorkflowCharge, charge)
	require.NoError(t, err)
	require.Equal(t, 1, svc.Payments.Charges(), "the attempt ran: the card was charged")
	require.ErrorIs(t, x.Result(nil), harvesttest.ErrNotClosed, "but the result was never recorded")

	// The task comes back after the ack wait (5 s), is reported lost,
	// and attempt 2 follows the retry policy's first backoff (2 s).
	require.NoError(t, env.Advance(ctx, 6999*time.Millisecond))
	require.ErrorIs(t, x.Result(nil), harvesttest.ErrNotClosed)
	require.NoError(t, env.Advance(ctx, time.Millisecond))
	var out examples.ChargeResult
	require.NoError(t, x.Result(&out))

	attempts := env.Attempts()
	require.Len(t, attempts, 3)
	require.True(t, attempts[0].ResultLost)
	require.Equal(t, 1, attempts[1].Attempt)
	require.True(t, attempts[1].Redelivered)
	require.Equal(t, "WorkerLost", attempts[1].Failure)
	require.Equal(t, 2, attempts[2].Attempt)
	require.True(t, attempts[2].PreviousOutcomeUnknown, "attempt 2 reconciled first")
	for _, a := range attempts {
		require.Equal(t, attempts[0].IdempotencyKey, a.IdempotencyKey)
	}
	require.Equal(t, 1, svc.Payments.Charges(), "the reconcile found the charge: none was made again")
	c, found, err := svc.Payments.FindCharge(ctx, attempts[0].IdempotencyKey.String())
	require.NoError(t, err)
	require.True(t, found)
	require.Equal(t, c.ID, out.ChargeID)
	require.Equal(t, 1, countEvents(t, x, "ActivityCompleted"))
}

// keyRecorder is an activity without a reconcile function that charges
// through fakepay under its idempotency key and records each run's key.
type keyRecorder struct {
	mu   sync.Mutex
	keys []harvest.ActivityKey
}

func (k *keyRecorder) register(svc *examples.Services) func(*harvest.Worker) {
	return func(w *harvest.Worker) {
		registerOne(w, "pay", func(ctx *harvest.ActivityContext, in examples.ChargeInput) (string, error) {
			k.mu.Lock()
			k.keys = append(k.keys, ctx.IdempotencyKey())
			k.mu.Unlock()
			c, err := svc.Payments.CreateCharge(ctx, ctx.IdempotencyKey().String(), in.AmountCents, in.CustomerID)
			return c.ID, err
		})
	}
}

func TestLostActivityResultRunsTheActivityAgainWithTheSameKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	rec := &keyRecorder{}
	env, err := harvesttest.New(rec.register(svc), harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	env.Inject(harvesttest.LoseActivityResult("pay"))
	x, err := env.Start(ctx, "pay", charge)
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, time.Minute))
	var id string
	require.NoError(t, x.Result(&id))

	require.Len(t, rec.keys, 2, "the activity ran again")
	require.Equal(t, rec.keys[0], rec.keys[1], "with the same idempotency key")
	require.Equal(t, 2, svc.Payments.Requests())
	require.Equal(t, 1, svc.Payments.Charges(), "which the provider deduplicated")
	require.Equal(t, 2, env.Workers())
}

func TestLostWorkflowTaskResultBetweenTwoSteps(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	env := newEnv(t, svc)

	// The first task schedules create_db_user; the second, after it,
	// send_welcome_email: its worker dies before reporting it.
	env.Inject(harvesttest.LoseWorkflowTaskResult(examples.WorkflowOnboarding).Skip(1))
	x, err := env.Start(ctx, examples.WorkflowOnboarding, examples.OnboardingInput{UserID: 7})
	require.NoError(t, err)
	require.Equal(t, 1, svc.Users.Effects())
	require.Equal(t, 0, svc.Mail.Calls(), "the second step was decided, never recorded")
	require.Equal(t, 1, countEvents(t, x, "ActivityScheduled"))

	require.NoError(t, env.Advance(ctx, time.Minute))
	var out examples.OnboardingResult
	require.NoError(t, x.Result(&out))
	require.Equal(t, 2, env.Workers())
	require.Equal(t, 1, svc.Users.Effects())
	require.Equal(t, 1, svc.Mail.Effects())
	require.Equal(t, 2, countEvents(t, x, "ActivityScheduled"), "the new worker decided the same")

	// The new worker could not know whether the dead one ran the email's
	// first attempt eagerly: it counted as lost, and attempt 2 ran.
	attempts := env.Attempts()
	last := attempts[len(attempts)-1]
	require.Equal(t, examples.ActivitySendWelcome, last.Activity)
	require.Equal(t, 2, last.Attempt)
	require.True(t, last.PreviousOutcomeUnknown)

	require.NoError(t, x.Replay(nil))
}

// steps registers a workflow that runs activity first, waits for the
// signal "go", then runs activity "b".
func steps(first string) func(*harvest.Worker) {
	return func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "steps", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.ExecuteActivity(ctx, first, nil).Get(nil); err != nil {
				return "", err
			}
			if err := harvest.GetSignalChannel(ctx, "go").Receive(nil); err != nil {
				return "", err
			}
			return "done", harvest.ExecuteActivity(ctx, "b", nil).Get(nil)
		})
		for _, name := range []string{"a", "b"} {
			harvest.RegisterActivity(w, name, func(*harvest.ActivityContext, struct{}) (string, error) { return name, nil })
		}
	}
}

func TestRestartWithChangedCodeIsNonDeterministic(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(steps("a"), harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	x, err := env.Start(ctx, "steps", nil)
	require.NoError(t, err)

	// The same code on a new worker carries on.
	require.NoError(t, x.Replay(nil))
	require.ErrorIs(t, x.Replay(steps("b")), harvest.ErrNonDeterministic)

	require.NoError(t, env.RestartWorker(ctx, steps("b")))
	_, err = x.Signal(ctx, "go", nil)
	require.ErrorIs(t, err, harvest.ErrNonDeterministic)
	status, err := x.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, status, "the task is retried, the execution stuck until the code is fixed")

	require.NoError(t, env.RestartWorker(ctx, steps("a")))
	require.NoError(t, env.Advance(ctx, 5*time.Second))
	var out string
	require.NoError(t, x.Result(&out))
	require.Equal(t, "done", out)
}

func TestStartWindowAndRetentionOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	env := newEnv(t, svc)

	first, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, harvesttest.DefaultStartIdempotencyWindow-time.Second))
	again, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.True(t, again.Deduplicated)
	require.Equal(t, first.ID, again.ID)

	require.NoError(t, env.Advance(ctx, time.Second))
	fresh, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.False(t, fresh.Deduplicated, "past the window the key starts a fresh run")
	require.NotEqual(t, first.ID, fresh.ID)
	require.Equal(t, 2, svc.Payments.Charges(), "with its own activity key: the card is charged again")

	// Closed at the start, the first run stays for its retention.
	require.NoError(t, env.Advance(ctx, harvesttest.DefaultRetention-harvesttest.DefaultStartIdempotencyWindow))
	_, err = first.Describe()
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, time.Millisecond))
	_, err = first.Describe()
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	_, err = first.History()
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	_, err = fresh.Describe()
	require.NoError(t, err, "the second run closed a day later")
}

func TestRetryBackoffRunsOnTheClock(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	runs := 0
	env, err := harvesttest.New(func(w *harvest.Worker) {
		registerOne(w, "flaky", func(*harvest.ActivityContext, struct{}) (int, error) {
			mu.Lock()
			defer mu.Unlock()
			runs++
			if runs < 3 {
				return 0, errors.New("unavailable")
			}
			return runs, nil
		}, harvest.ActivityOptions{RetryPolicy: harvest.RetryExponential(3, 2*time.Second)})
	}, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	x, err := env.Start(ctx, "flaky", nil)
	require.NoError(t, err)

	for _, step := range []struct {
		advance time.Duration
		runs    int
	}{{0, 1}, {2*time.Second - time.Millisecond, 1}, {time.Millisecond, 2}, {4*time.Second - time.Millisecond, 2}, {time.Millisecond, 3}} {
		require.NoError(t, env.Advance(ctx, step.advance))
		mu.Lock()
		require.Equal(t, step.runs, runs, "after %s", step.advance)
		mu.Unlock()
	}
	var n int
	require.NoError(t, x.Result(&n))
	require.Equal(t, 3, n)
}

func TestNonRetryableErrorFailsTheWorkflow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	svc := examples.NewServices()
	env := newEnv(t, svc)
	// fakepay declines customer "cus_declined".
	x, err := env.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 100, CustomerID: "cus_declined"})
	require.NoError(t, err)
	err = x.Result(nil)
	var ae *harvest.ApplicationError
	require.ErrorAs(t, err, &ae)
	require.Equal(t, "github.com/harvest-engine/harvest.ActivityError", ae.Type, "the workflow returned the activity's error as it is")
	require.Contains(t, ae.Message, "CardDeclined: customer cus_declined: card declined")
	require.Len(t, env.Attempts(), 1, "not retried")
}

func TestStartChecksTheInputSchema(t *testing.T) {
	t.Parallel()
	env := newEnv(t, examples.NewServices())
	_, err := env.Start(context.Background(), examples.WorkflowCharge, examples.ChargeInput{AmountCents: 0, CustomerID: "cus_1"})
	require.ErrorIs(t, err, client.ErrInputInvalid)
	_, err = env.Start(context.Background(), "no_such_workflow", nil)
	require.ErrorIs(t, err, client.ErrUnknownWorkflow)
}

func TestHeartbeatDetailsReachTheNextAttempt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	var seen []int
	env, err := harvesttest.New(func(w *harvest.Worker) {
		registerOne(w, "beat", func(ctx *harvest.ActivityContext, _ struct{}) (int, error) {
			var from int
			if _, err := ctx.HeartbeatDetails(&from); err != nil {
				return 0, err
			}
			mu.Lock()
			seen = append(seen, from)
			mu.Unlock()
			ctx.Heartbeat(from + 10)
			if ctx.Attempt() == 1 {
				return 0, errors.New("interrupted")
			}
			return from, nil
		}, harvest.ActivityOptions{HeartbeatTimeout: time.Minute})
	}, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	x, err := env.Start(ctx, "beat", nil)
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, time.Second))
	var n int
	require.NoError(t, x.Result(&n))
	require.Equal(t, 10, n)
	require.Equal(t, []int{0, 10}, seen)
}

func TestHistoryIsTheAPIs(t *testing.T) {
	t.Parallel()
	env := newEnv(t, examples.NewServices())
	x, err := env.Start(context.Background(), examples.WorkflowSleep, examples.SleepInput{Duration: "1h"})
	require.NoError(t, err)
	require.NoError(t, env.Advance(context.Background(), time.Hour))
	events, err := x.History()
	require.NoError(t, err)
	var types []string
	for _, ev := range events {
		types = append(types, ev.Type)
	}
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "TimerStarted", "TimerFired", "WorkflowTaskCompleted", "WorkflowCompleted"}, types)
	require.Equal(t, env.Now(), events[3].At)
	raw, err := json.Marshal(events[5])
	require.NoError(t, err)
	require.Contains(t, string(raw), `"result"`)
}

func TestOnceRunsItsEffectOnceAcrossALostResult(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var mu sync.Mutex
	runs, sends := 0, 0
	env, err := harvesttest.New(func(w *harvest.Worker) {
		registerOne(w, "send_sms", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			mu.Lock()
			runs++
			mu.Unlock()
			// An SMS gateway that cannot deduplicate: Once records the send.
			return harvest.Once(ctx, ctx.IdempotencyKey().Subkey("sms"), func(context.Context) (string, error) {
				mu.Lock()
				defer mu.Unlock()
				sends++
				return "sms-1", nil
			})
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	env.Inject(harvesttest.LoseActivityResult("send_sms"))
	x, err := env.Start(ctx, "send_sms", nil)
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, time.Minute))
	var ref string
	require.NoError(t, x.Result(&ref))
	require.Equal(t, "sms-1", ref)
	require.Equal(t, 2, runs, "the activity ran again")
	require.Equal(t, 1, sends, "Once found the recorded send")
}

func TestConfigIsChecked(t *testing.T) {
	t.Parallel()
	register := func(w *harvest.Worker) { examples.Register(w, examples.NewServices()) }
	_, err := harvesttest.New(register, harvesttest.Config{TaskAckWait: -time.Second})
	require.ErrorContains(t, err, "TaskAckWait")
	_, err = harvesttest.New(register, harvesttest.Config{Retention: time.Hour})
	require.ErrorContains(t, err, "shorter than start_idempotency_window", "retention shorter than the start window is refused, as the scheduler refuses it")
	_, err = harvesttest.New(func(w *harvest.Worker) { harvest.RegisterWorkflow(w, "", examples.ChargeWorkflow) }, harvesttest.Config{})
	require.ErrorIs(t, err, harvest.ErrRegistration)
}

func TestCancelClosesTheExecutionAndItsKeyStillResolves(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())
	x, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, harvesttest.StartOptions{IdempotencyKey: "c-1"})
	require.NoError(t, err)
	require.NoError(t, x.Cancel(ctx, "no longer needed"))
	status, err := x.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, status)
	_, err = x.Signal(ctx, "item", "late")
	require.ErrorIs(t, err, client.ErrExecutionTerminal)
	again, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, harvesttest.StartOptions{IdempotencyKey: "c-1"})
	require.NoError(t, err)
	require.True(t, again.Deduplicated)
	require.Equal(t, x.ID, again.ID)
}

// TestWhatHarvestCannotStoreIsRefused: a start or signal carrying U+0000,
// which PostgreSQL refuses, is refused as ingest refuses it, and changes
// nothing.
func TestWhatHarvestCannotStoreIsRefused(t *testing.T) {
	env := newEnv(t, examples.NewServices())
	ctx := context.Background()
	_, err := env.Start(ctx, examples.WorkflowOnboarding, json.RawMessage(`{"user_id": 1, "name": "a\u0000"}`))
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodePayloadUnstorable, apiErr.Code)
	require.Equal(t, "input", apiErr.Field)
	_, err = env.Start(ctx, examples.WorkflowOnboarding, examples.OnboardingInput{UserID: 1}, harvesttest.StartOptions{IdempotencyKey: "k\x00"})
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "idempotency_key", apiErr.Field)
	x, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1})
	require.NoError(t, err)
	_, err = x.Signal(ctx, "item", "a\x00")
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, "payload", apiErr.Field)
}

// TestOnActivityReplacesAnActivity: a fake runs instead of the registered
// activity, from the next attempt on and after a worker restart; a fake
// that is not an activity's form is refused.
func TestOnActivityReplacesAnActivity(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())
	require.ErrorContains(t, env.OnActivity(examples.ActivityChargeCard, func(string) error { return nil }), "is not an activity")
	var charged []int64
	require.NoError(t, env.OnActivity(examples.ActivityChargeCard, func(_ *harvest.ActivityContext, in examples.ChargeInput) (examples.ChargeResult, error) {
		charged = append(charged, in.AmountCents)
		return examples.ChargeResult{ChargeID: "fake_ch"}, nil
	}))
	x, err := env.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 250, CustomerID: "cus_1"})
	require.NoError(t, err)
	var res examples.ChargeResult
	require.NoError(t, x.Result(&res))
	require.Equal(t, "fake_ch", res.ChargeID)
	require.NoError(t, env.RestartWorker(ctx, nil))
	y, err := env.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 300, CustomerID: "cus_1"})
	require.NoError(t, err)
	require.NoError(t, y.Result(&res))
	require.Equal(t, []int64{250, 300}, charged, "the fake outlives the restart")
}

// TestStartsWithAReusePolicyAndSignalWithStart: the kit's starts take a
// reuse policy and signal-with-start, as the API's do.
func TestStartsWithAReusePolicyAndSignalWithStart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())
	x, err := env.SignalWithStart(ctx, examples.WorkflowCollect, "order-9", "item", map[string]int{"n": 1}, examples.CollectInput{Count: 2})
	require.NoError(t, err)
	require.True(t, x.StartedFresh)
	again, err := env.SignalWithStart(ctx, examples.WorkflowCollect, "order-9", "item", map[string]int{"n": 2}, examples.CollectInput{Count: 2})
	require.NoError(t, err)
	require.Equal(t, x.ID, again.ID, "the running execution gets the signal")
	require.False(t, again.StartedFresh)
	var res examples.CollectResult
	require.NoError(t, x.Result(&res))
	require.Len(t, res.Items, 2)

	_, err = env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1},
		harvesttest.StartOptions{WorkflowID: "order-9", ReusePolicy: "reject_duplicate"})
	require.ErrorIs(t, err, client.ErrWorkflowIDConflict)
	_, err = env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, harvesttest.StartOptions{ReusePolicy: "sometimes"})
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeInvalidReusePolicy, apiErr.Code)
	_, err = env.SignalWithStart(ctx, examples.WorkflowCollect, "", "item", nil, nil)
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeInvalidWorkflowID, apiErr.Code)
	_, err = env.SignalWithStart(ctx, examples.WorkflowCollect, "order-9", "item", nil, nil, harvesttest.StartOptions{WorkflowID: "order-10"})
	require.ErrorContains(t, err, `StartOptions.WorkflowID "order-10" is not the workflowID "order-9"`)
}

// TestFanoutReplaysAsItRan: the fanout example, which uses the
// determinism helpers (goroutines, a channel, a selector with a timer it
// cancels, a side effect, Now), decides on every replay as it did.
func TestFanoutReplaysAsItRan(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())
	x, err := env.Start(ctx, examples.WorkflowFanout, examples.FanoutInput{Items: []int{3, 1, 2}, Deadline: "1m"})
	require.NoError(t, err)
	var res examples.FanoutResult
	require.NoError(t, x.Result(&res))
	require.Equal(t, []int{9, 1, 4}, res.Squares)
	require.Equal(t, 14, res.Sum)
	require.False(t, res.TimedOut)
	require.Len(t, res.BatchID, 16)
	require.Equal(t, 1, res.Version)
	require.Equal(t, 1, countEvents(t, x, "VersionMarker"), "the version is recorded once")
	require.Equal(t, 1, countEvents(t, x, "MarkerRecorded"), "the batch id is drawn once")
	require.Equal(t, 1, countEvents(t, x, "TimerCancelled"), "the deadline is cancelled once every square is in")
	require.NoError(t, env.Advance(ctx, 2*time.Minute))
	require.Zero(t, countEvents(t, x, "TimerFired"), "a cancelled timer never fires")
	require.NoError(t, env.RestartWorker(ctx, nil))
	require.NoError(t, x.Replay(nil))
}

// TestASignalArrivesWhileAnActivityRuns: with ConcurrentActivities an
// attempt runs on a goroutine of its own, Start returns while it runs,
// and a signal reaches the execution meanwhile; Settle waits for the
// attempt to end.
func TestASignalArrivesWhileAnActivityRuns(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	started := make(chan struct{}, 1)
	release := make(chan struct{})
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "hurry", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			long := harvest.ExecuteActivity(ctx, "long", nil)
			out := ""
			harvest.NewSelector(ctx).
				AddFuture(long, func(f *harvest.Future) { _ = f.Get(&out) }).
				AddReceive(harvest.GetSignalChannel(ctx, "hurry"), func(c *harvest.SignalChannel) { _ = c.Receive(nil); out = "hurried" }).
				Select()
			return out, nil
		})
		harvest.RegisterActivity(w, "long", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			started <- struct{}{}
			select {
			case <-release:
				return "done", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		})
	}, harvesttest.Config{ConcurrentActivities: true})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "hurry", nil)
	require.NoError(t, err, "Start returns while the activity runs")
	<-started
	delivered, err := x.Signal(ctx, "hurry", nil)
	require.NoError(t, err)
	require.True(t, delivered)
	var out string
	require.NoError(t, x.Result(&out), "the workflow completed while its activity ran")
	require.Equal(t, "hurried", out)
	close(release)
	require.NoError(t, env.Settle(ctx))
	require.Len(t, env.Attempts(), 1)
}
