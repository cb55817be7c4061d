package harvesttest_test

import (
	"encoding/json"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/harvesttest"
)

// TestASagaCancelledAtEachStepUndoesWhatItDid: checkout (reserve,
// charge, wait for "ship", ship) cancelled at each point undoes exactly
// the steps that completed, most recent first, and closes Cancelled with
// what it undid; cancelled once shipped, it is left Completed. A step
// cancelled while its activity waited for a retry is given up: no further
// attempt runs. The recorded history replays on the same code.
func TestASagaCancelledAtEachStepUndoesWhatItDid(t *testing.T) {
	t.Parallel()
	register := func(w *harvest.Worker) { examples.Register(w, examples.NewServices()) }
	for _, tc := range []struct {
		name string
		// busy is the step whose first attempt fails, so that the saga
		// waits there for its retry when it is cancelled; "" for none.
		busy    string
		shipped bool
		undone  []string
	}{
		{name: "reserving", busy: examples.ActivityCheckoutReserve},
		{name: "charging", busy: examples.ActivityCheckoutCharge, undone: []string{examples.ActivityCheckoutRelease}},
		{name: "waiting to ship", undone: []string{examples.ActivityCheckoutRefund, examples.ActivityCheckoutRelease}},
		{name: "shipped", shipped: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			env, err := harvesttest.New(register, harvesttest.Config{})
			require.NoError(t, err)
			defer env.Close()
			if tc.busy != "" {
				require.NoError(t, env.OnActivity(tc.busy, func(ctx *harvest.ActivityContext, in examples.CheckoutInput) (string, error) {
					if ctx.Attempt() == 1 {
						return "", errors.New("the warehouse is busy")
					}
					return "late", nil
				}))
			}
			x, err := env.Start(ctx, examples.WorkflowCheckout, examples.CheckoutInput{OrderID: "o-1"})
			require.NoError(t, err)
			if tc.shipped {
				_, err = x.Signal(ctx, examples.ShipSignal.Name, "dock 4")
				require.NoError(t, err)
			}
			require.NoError(t, x.Cancel(ctx, "customer left"))
			require.NoError(t, env.Advance(ctx, time.Hour), "no retry of a step given up runs")

			e, err := x.Describe()
			require.NoError(t, err)
			if tc.shipped {
				require.Equal(t, client.StatusCompleted, e.Status, "a closed execution is left as it ended")
				return
			}
			require.Equal(t, client.StatusCancelled, e.Status)
			require.NotNil(t, e.CancelRequestedAt)
			var out examples.CheckoutResult
			require.NoError(t, json.Unmarshal(e.Result, &out))
			require.Equal(t, tc.undone, out.Undone)

			var ran []string
			for _, a := range env.Attempts() {
				if a.ExecutionID == x.ID {
					ran = append(ran, a.Activity)
				}
			}
			for _, undo := range []string{examples.ActivityCheckoutRelease, examples.ActivityCheckoutRefund} {
				require.Equal(t, slices.Contains(tc.undone, undo), slices.Contains(ran, undo), "%s ran: %v", undo, ran)
			}
			if tc.busy != "" {
				require.Equal(t, 1, count(ran, tc.busy), "the step given up is not tried again: %v", ran)
			}
			require.Equal(t, 1, events(x, "WorkflowCancelRequested"))
			require.Equal(t, 1, events(x, "WorkflowCancelled"))
			givenUp := 0
			if tc.busy != "" {
				givenUp = 1 // the step waiting for its retry
			}
			require.Equal(t, givenUp, events(x, "ActivityCancelRequested"))
			require.NoError(t, x.Replay(register), "the history replays on the same code")
		})
	}
}

func count(xs []string, x string) int {
	n := 0
	for _, v := range xs {
		if v == x {
			n++
		}
	}
	return n
}

// TestCancellingTenTimesAsksOnce: ten cancels of a running execution
// record one WorkflowCancelRequested.
func TestCancellingTenTimesAsksOnce(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "stubborn", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			// Its cleanup outlives the request: it closes only when the
			// cleanup's timer fires.
			_ = harvest.Await(ctx, func() bool { return false })
			return "cleaned", harvest.Sleep(harvest.NewDisconnectedContext(ctx), time.Hour)
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "stubborn", struct{}{})
	require.NoError(t, err)
	for range 10 {
		require.NoError(t, x.Cancel(ctx, "stop"))
	}
	require.Equal(t, 1, events(x, "WorkflowCancelRequested"))
	status, err := x.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, status, "its cleanup runs")
	require.NoError(t, env.Advance(ctx, time.Hour))
	e, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusCancelled, e.Status)
	require.JSONEq(t, `"cleaned"`, string(e.Result))
}

// TestACancelGraceTerminatesCodeThatDoesNotClose: a workflow whose
// cleanup outlasts the cancel's grace is terminated at its end, on the
// Env's clock; the grace configured for the workflow applies when the
// cancel gives none.
func TestACancelGraceTerminatesCodeThatDoesNotClose(t *testing.T) {
	t.Parallel()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "slow_cleanup", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			_ = harvest.Await(ctx, func() bool { return false })
			return "cleaned", harvest.Sleep(harvest.NewDisconnectedContext(ctx), time.Hour)
		})
	}
	for _, tc := range []struct {
		name  string
		cfg   harvesttest.Config
		grace time.Duration
	}{
		{"request", harvesttest.Config{}, 10 * time.Minute},
		{"configured", harvesttest.Config{CancelGraceByWorkflow: map[string]time.Duration{"slow_cleanup": 10 * time.Minute}}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx := t.Context()
			env, err := harvesttest.New(register, tc.cfg)
			require.NoError(t, err)
			defer env.Close()
			x, err := env.Start(ctx, "slow_cleanup", struct{}{})
			require.NoError(t, err)
			require.NoError(t, x.CancelWithGrace(ctx, "stop", tc.grace))
			require.NoError(t, env.Advance(ctx, 9*time.Minute))
			status, err := x.Status()
			require.NoError(t, err)
			require.Equal(t, client.StatusRunning, status)
			require.NoError(t, env.Advance(ctx, time.Minute))
			status, err = x.Status()
			require.NoError(t, err)
			require.Equal(t, client.StatusTerminated, status)
		})
	}
}

// TestTimeoutsFireOnTheEnvsClock: a run timeout closes a waiting
// execution TimedOut when its clock passes it; with the workflow's
// cancel_grace the saga is asked to cancel first, undoes its steps, and
// closes TimedOut with what it undid; an execution timeout bounds the
// chain of continued runs; a run timeout longer than the execution
// timeout is refused.
func TestTimeoutsFireOnTheEnvsClock(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	register := func(w *harvest.Worker) { examples.Register(w, examples.NewServices()) }

	env, err := harvesttest.New(register, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, examples.WorkflowCheckout, examples.CheckoutInput{OrderID: "o-1"}, harvesttest.StartOptions{RunTimeout: 30 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, 29*time.Minute))
	status, err := x.Status()
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, status)
	require.NoError(t, env.Advance(ctx, time.Minute))
	e, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusTimedOut, e.Status, "no grace: closed at once, nothing undone")
	require.Equal(t, 0, events(x, "WorkflowCancelRequested"))

	graced, err := harvesttest.New(register, harvesttest.Config{CancelGraceByWorkflow: map[string]time.Duration{examples.WorkflowCheckout: 5 * time.Minute}})
	require.NoError(t, err)
	defer graced.Close()
	x, err = graced.Start(ctx, examples.WorkflowCheckout, examples.CheckoutInput{OrderID: "o-2"}, harvesttest.StartOptions{RunTimeout: 30 * time.Minute})
	require.NoError(t, err)
	require.NoError(t, graced.Advance(ctx, 30*time.Minute))
	e, err = x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusTimedOut, e.Status)
	var out examples.CheckoutResult
	require.NoError(t, json.Unmarshal(e.Result, &out))
	require.Equal(t, []string{examples.ActivityCheckoutRefund, examples.ActivityCheckoutRelease}, out.Undone, "the grace let it clean up")
	require.Equal(t, 1, events(x, "WorkflowCancelRequested"))
	require.Equal(t, 1, events(x, "WorkflowTimedOut"))
	require.NoError(t, x.Replay(register))

	// tally continues as new every signal: the execution timeout counts
	// from its first run, across them.
	chained, err := harvesttest.New(register, harvesttest.Config{TimeoutsByWorkflow: map[string]harvesttest.Timeouts{examples.WorkflowTally: {Execution: time.Hour}}})
	require.NoError(t, err)
	defer chained.Close()
	x, err = chained.Start(ctx, examples.WorkflowTally, examples.TallyInput{Every: 1})
	require.NoError(t, err)
	for i := range 3 {
		require.NoError(t, chained.Advance(ctx, 15*time.Minute))
		_, err = x.Signal(ctx, examples.AddSignal.Name, i)
		require.NoError(t, err)
	}
	require.NoError(t, chained.Advance(ctx, 15*time.Minute))
	newest, err := x.Describe()
	require.NoError(t, err)
	for newest.ContinuedAs != "" {
		newest, err = chained.Execution(newest.ContinuedAs).Describe()
		require.NoError(t, err)
	}
	require.NotEqual(t, x.ID, newest.ExecutionID)
	require.Equal(t, client.StatusTimedOut, newest.Status)

	_, err = env.Start(ctx, examples.WorkflowCheckout, examples.CheckoutInput{OrderID: "o-3"},
		harvesttest.StartOptions{RunTimeout: 2 * time.Hour, ExecutionTimeout: time.Hour})
	var apiErr *client.APIError
	require.ErrorAs(t, err, &apiErr)
	require.Equal(t, client.CodeInvalidTimeout, apiErr.Code)
}
