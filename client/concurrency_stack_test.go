package client_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestClientConcurrency(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	opts := client.StartOptions{StartPolicy: &client.StartPolicy{Concurrency: &client.Concurrency{Limit: 2, Key: "/customer"}}}
	in := map[string]any{"every": 100, "until": 1, "customer": "c1"}

	// Two run; the third waits for a slot of c1.
	var runs []*client.StartResult
	for range 3 {
		r, err := c.Start(ctx, examples.WorkflowTally, in, opts)
		require.NoError(t, err)
		require.True(t, r.StartedFresh)
		runs = append(runs, r)
	}
	require.Equal(t, client.StatusRunning, runs[0].Status)
	require.Equal(t, client.StatusRunning, runs[1].Status)
	require.Equal(t, client.StatusPending, runs[2].Status)
	require.Equal(t, client.WaitingForConcurrency, runs[2].WaitingFor)
	require.Empty(t, runs[0].WaitingFor)
	pending, err := c.Describe(ctx, runs[2].ExecutionID)
	require.NoError(t, err)
	require.Equal(t, client.StatusPending, pending.Status)
	require.False(t, pending.Terminal())
	require.Equal(t, client.WaitingForConcurrency, pending.WaitingFor)
	require.NotNil(t, pending.ConcurrencyKey)
	require.Equal(t, "c1", *pending.ConcurrencyKey)

	got, err := c.Concurrency(ctx, examples.WorkflowTally, "c1")
	require.NoError(t, err)
	require.Equal(t, client.ConcurrencyResponse{Workflow: examples.WorkflowTally, Key: "c1", Running: 2, Pending: 1, Limit: 2}, *got)
	// A key no start used has nothing, and no limit.
	none, err := c.Concurrency(ctx, examples.WorkflowTally, "c2")
	require.NoError(t, err)
	require.Equal(t, client.ConcurrencyResponse{Workflow: examples.WorkflowTally, Key: "c2"}, *none)

	list, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowTally, Status: client.StatusPending})
	require.NoError(t, err)
	require.Len(t, list, 1)
	require.Equal(t, runs[2].ExecutionID, list[0].ExecutionID)

	// An input without the key is refused with its code.
	_, err = c.Start(ctx, examples.WorkflowTally, map[string]any{"every": 100}, opts)
	var apiErr *client.APIError
	require.True(t, errors.As(err, &apiErr), "%v", err)
	require.Equal(t, client.CodeConcurrencyKeyMissing, apiErr.Code)
}
