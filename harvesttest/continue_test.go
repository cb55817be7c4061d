package harvesttest_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// counterState is what the counter workflow carries from run to run.
type counterState struct {
	Seen []int `json:"seen"`
	Runs int   `json:"runs"`
}

// registerCounter registers counter: it collects the signals "n" and
// continues as new every 3 of them, until it has 10, which it returns.
func registerCounter(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "counter", func(ctx *harvest.WorkflowContext, st counterState) (counterState, error) {
		st.Runs++
		for range 3 {
			v, err := harvest.NewSignal[int]("n").Receive(ctx)
			if err != nil {
				return st, err
			}
			st.Seen = append(st.Seen, v)
			if len(st.Seen) == 10 {
				return st, nil
			}
		}
		return counterState{}, harvest.ContinueAsNew(ctx, st)
	})
}

// TestAChainOfRunsTakesEverySignalOnce: counter continues as new every
// three signals. Ten keyed signals, all sent to the first run's id, some
// twice, reach the newest run each time: every signal is taken once, in
// order, across four runs linked both ways; a key sent again after the
// run it landed in has continued is still a duplicate. Signals that came
// in while a run's last task ran move to the next run.
func TestAChainOfRunsTakesEverySignalOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(registerCounter, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	first, err := env.Start(ctx, "counter", counterState{}, harvesttest.StartOptions{WorkflowID: "count-1"})
	require.NoError(t, err)
	for i := range 10 {
		delivered, err := first.Signal(ctx, "n", i, harvesttest.SignalOptions{IdempotencyKey: fmt.Sprint("n-", i)})
		require.NoError(t, err)
		require.True(t, delivered, "signal %d", i)
		if i%4 == 0 {
			again, err := first.Signal(ctx, "n", i, harvesttest.SignalOptions{IdempotencyKey: fmt.Sprint("n-", i)})
			require.NoError(t, err)
			require.False(t, again, "signal %d again is a duplicate", i)
		}
	}
	// Follow the chain.
	var runs []client.Execution
	id := first.ID
	for id != "" {
		d, err := env.Execution(id).Describe()
		require.NoError(t, err)
		runs = append(runs, d)
		id = d.ContinuedAs
	}
	require.Len(t, runs, 4)
	for i, r := range runs[:3] {
		require.Equal(t, client.StatusContinuedAsNew, r.Status, "run %d", i)
		require.Equal(t, runs[i+1].ExecutionID, r.ContinuedAs)
		require.Equal(t, r.ExecutionID, runs[i+1].ContinuedFrom)
		require.Equal(t, "count-1", runs[i+1].WorkflowID)
	}
	last := env.Execution(runs[3].ExecutionID)
	var st counterState
	require.NoError(t, last.Result(&st))
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7, 8, 9}, st.Seen)
	require.Equal(t, 4, st.Runs)
	// A key seen by an earlier run is a duplicate for the chain.
	again, err := first.Signal(ctx, "n", 2, harvesttest.SignalOptions{IdempotencyKey: "n-2"})
	require.NoError(t, err)
	require.False(t, again)
}
