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
