package workerrt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// chainState is what chain carries from run to run.
type chainState struct {
	Seen []int `json:"seen"`
	Runs int   `json:"runs"`
}

// TestAChainOfRunsOnPostgreSQL: a workflow that continues as new every
// 5 signals takes 40 keyed signals, sent to its first run's id as fast
// as they go (so that many arrive while a run's last task runs, and move
// to the next run), every tenth sent twice: the chain's last run returns
// each value once, in the order sent, and every run but the last closed
// ContinuedAsNew, linked both ways, under one workflow_id. WaitResult on
// the first run's id waits for the chain's result. The worker keeps no
// cache, so that every task fetches its run's history.
func TestAChainOfRunsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	const total, perRun = 40, 5
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{WorkflowCacheSize: -1}, Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "chain", func(ctx *harvest.WorkflowContext, st chainState) (chainState, error) {
			st.Runs++
			for range perRun {
				v, err := harvest.NewSignal[int]("n").Receive(ctx)
				if err != nil {
					return st, err
				}
				st.Seen = append(st.Seen, v)
				if len(st.Seen) == total {
					return st, nil
				}
			}
			return chainState{}, harvest.ContinueAsNew(ctx, st)
		})
	}})
	c, ctx := stacktest.Client(t, s)
	res, err := c.Start(ctx, "chain", chainState{}, client.StartOptions{WorkflowID: "chain-1"})
	require.NoError(t, err)
	first := res.ExecutionID
	for i := range total {
		send := func() {
			r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+first+"/signals/n", map[string]string{"Idempotency-Key": fmt.Sprint("n-", i)}, fmt.Sprint(i))
			require.Equal(t, 202, r.Status, r.Body)
		}
		send()
		if i%10 == 0 {
			send()
		}
	}
	var st chainState
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	last, err := c.WaitResult(wctx, first, &st)
	require.NoError(t, err)
	want := make([]int, total)
	for i := range want {
		want[i] = i
	}
	require.Equal(t, want, st.Seen, "each signal once, in order")
	require.Equal(t, total/perRun, st.Runs)

	runs := 0
	for id := first; id != ""; runs++ {
		e, err := c.Describe(ctx, id)
		require.NoError(t, err)
		require.Equal(t, "chain-1", e.WorkflowID)
		if e.ContinuedAs == "" {
			require.Equal(t, client.StatusCompleted, e.Status)
			require.Equal(t, last.ExecutionID, e.ExecutionID)
		} else {
			require.Equal(t, client.StatusContinuedAsNew, e.Status)
			next, err := c.Describe(ctx, e.ContinuedAs)
			require.NoError(t, err)
			require.Equal(t, id, next.ContinuedFrom)
		}
		id = e.ContinuedAs
	}
	require.Equal(t, total/perRun, runs)

	// A key the chain took is a duplicate, whichever run took it.
	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+first+"/signals/n", map[string]string{"Idempotency-Key": "n-3"}, "3")
	require.Equal(t, 202, r.Status, r.Body)
	require.Equal(t, false, r.Body["signal_delivered"], r.Body)
}

// TestACancelReachesTheChainsNewestRun: a cancel sent to the first run of
// a chain that continued as new twice cancels its newest run, on
// PostgreSQL, and answers with it.
func TestACancelReachesTheChainsNewestRun(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	res, err := c.Start(ctx, "tally", map[string]int{"every": 1}, client.StartOptions{WorkflowID: "tally-cancel"})
	require.NoError(t, err)
	first := res.ExecutionID
	for i := range 2 {
		require.NoError(t, c.SendSignal(ctx, first, "add", i))
	}
	// Two runs continued: the third waits for its signal.
	var third string
	probe.Until(t, 30*time.Second, "the chain's third run", func() bool {
		id := first
		for range 2 {
			e, err := c.Describe(ctx, id)
			require.NoError(t, err)
			if e.ContinuedAs == "" {
				return false
			}
			id = e.ContinuedAs
		}
		third = id
		return true
	})
	out, err := c.Cancel(ctx, first, "no more")
	require.NoError(t, err)
	require.Equal(t, third, out.ExecutionID)
	stacktest.WaitStatus(t, s, third, client.StatusCancelled)
	e, err := c.Describe(ctx, third)
	require.NoError(t, err)
	require.NotNil(t, e.CancelRequestedAt)
	e, err = c.Describe(ctx, first)
	require.NoError(t, err)
	require.Equal(t, client.StatusContinuedAsNew, e.Status)
}
