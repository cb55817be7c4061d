package main

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// order registers the tests' workflow: charge, then wait for the
// shipment. change says how a later deploy changed it: "" none, "bare"
// a fraud check inserted before the charge, "patched" the same behind
// harvest.Patched.
func order(change string) func(w *harvest.Worker) {
	return func(w *harvest.Worker) {
		for _, name := range []string{"order_charge", "order_fraud_check"} {
			harvest.RegisterActivity(w, name, func(_ *harvest.ActivityContext, _ struct{}) (struct{}, error) { return struct{}{}, nil })
		}
		harvest.RegisterWorkflow(w, "order", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if change == "bare" || (change == "patched" && harvest.Patched(ctx, "fraud-check")) {
				if err := harvest.ExecuteActivity(ctx, "order_fraud_check", struct{}{}).Get(nil); err != nil {
					return "", err
				}
			}
			if err := harvest.ExecuteActivity(ctx, "order_charge", struct{}{}).Get(nil); err != nil {
				return "", err
			}
			return "shipped", harvest.GetSignalChannel(ctx, "shipped").Receive(nil)
		})
	}
}

// TestExportedHistoriesStopABadDeploy: `harvest workflow histories
// export` writes the running executions' histories; replayed with
// harvesttest on the code about to be deployed, a change that would
// break them is reported with where it diverges, and the same change
// behind harvest.Patched passes.
func TestExportedHistoriesStopABadDeploy(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Register: order("")})
	addr := []string{"--addr", s.URL()}
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	ctx := t.Context()
	for range 3 {
		_, err := c.Start(ctx, "order", struct{}{}, client.StartOptions{})
		require.NoError(t, err)
	}
	probe.Until(t, 30*time.Second, "the three executions to wait for their shipment", func() bool {
		list, err := c.List(ctx, client.ListOptions{Workflow: "order"})
		require.NoError(t, err)
		waiting := 0
		for _, e := range list {
			hist, err := c.History(ctx, e.ExecutionID)
			require.NoError(t, err)
			charged := slices.ContainsFunc(hist, func(ev client.Event) bool { return ev.Type == "ActivityCompleted" })
			if charged && hist[len(hist)-1].Type == "WorkflowTaskCompleted" {
				waiting++
			}
		}
		return waiting == 3
	})

	dir := t.TempDir()
	out, _, err := runCLI(t, append([]string{"workflow", "histories", "export", "--workflow", "order", "--status", "Running", "--out", dir}, addr...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "wrote 3 histories of order")
	files, err := filepath.Glob(filepath.Join(dir, "order", "*.json"))
	require.NoError(t, err)
	require.Len(t, files, 3)

	same, err := harvesttest.ReplayHistoryDir(order(""), dir)
	require.NoError(t, err)
	require.Equal(t, 3, same.Replayed)
	require.Empty(t, same.Divergences)

	bad, err := harvesttest.ReplayHistoryDir(order("bare"), dir)
	require.NoError(t, err)
	require.Len(t, bad.Divergences, 3)
	var nd *harvest.NonDeterminismError
	require.True(t, errors.As(bad.Divergences[0], &nd), bad.Divergences[0])
	require.ErrorIs(t, bad.Divergences[0], harvest.ErrNonDeterministic)
	require.Contains(t, bad.Divergences[0].Error(), "order_charge")
	require.Contains(t, bad.Divergences[0].Error(), "order_fraud_check")

	patched, err := harvesttest.ReplayHistoryDir(order("patched"), dir)
	require.NoError(t, err)
	require.Empty(t, patched.Divergences)

	other, err := harvesttest.ReplayHistoryDir(func(*harvest.Worker) {}, dir)
	require.NoError(t, err)
	require.Zero(t, other.Replayed)
	require.Len(t, other.Skipped, 3, "histories of a workflow the code does not register are left out")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "order", "junk.json"), []byte(`{"nope": 1}`), 0o644))
	junk, err := harvesttest.ReplayHistoryDir(order(""), dir)
	require.NoError(t, err)
	require.Len(t, junk.Divergences, 1)
	require.ErrorContains(t, junk.Divergences[0], "not an exported history")

	_, _, err = runCLI(t, append([]string{"workflow", "histories", "export", "--workflow", "no.such", "--out", dir}, addr...)...)
	require.ErrorContains(t, err, "--workflow")
}
