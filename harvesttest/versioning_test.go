package harvesttest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/harvesttest"
)

// A deploy while executions run, as a user's test of it would be
// written: v2 puts a fraud check before the charge behind
// harvest.Patched. The execution that charged under v1 finishes on v1's
// path after the deploy; one started after it takes the check; the
// histories show the one marker.
func TestADeployKeepsRunningExecutionsOnTheirPath(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var ran []string
	activities := func(w *harvest.Worker) {
		for _, name := range []string{"charge", "fraud_check"} {
			harvest.RegisterActivity(w, name, func(_ *harvest.ActivityContext, _ struct{}) (struct{}, error) {
				ran = append(ran, name)
				return struct{}{}, nil
			})
		}
	}
	order := func(patched bool) func(w *harvest.Worker) {
		return func(w *harvest.Worker) {
			activities(w)
			harvest.RegisterWorkflow(w, "order", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				path := "v1"
				if patched && harvest.Patched(ctx, "fraud-check") {
					path = "v2"
					if err := harvest.ExecuteActivity(ctx, "fraud_check", struct{}{}).Get(nil); err != nil {
						return "", err
					}
				}
				if err := harvest.ExecuteActivity(ctx, "charge", struct{}{}).Get(nil); err != nil {
					return "", err
				}
				var parcel string
				if err := harvest.GetSignalChannel(ctx, "shipped").Receive(&parcel); err != nil {
					return "", err
				}
				return path + ":" + parcel, nil
			})
		}
	}
	env, err := harvesttest.New(order(false), harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	old, err := env.Start(ctx, "order", struct{}{})
	require.NoError(t, err)
	require.Equal(t, []string{"charge"}, ran)

	require.NoError(t, env.RestartWorker(ctx, order(true)))
	fresh, err := env.Start(ctx, "order", struct{}{})
	require.NoError(t, err)
	require.Equal(t, []string{"charge", "fraud_check", "charge"}, ran)

	for _, x := range []*harvesttest.Execution{old, fresh} {
		_, err := x.Signal(ctx, "shipped", "parcel")
		require.NoError(t, err)
	}
	var got string
	require.NoError(t, old.Result(&got))
	require.Equal(t, "v1:parcel", got)
	require.NoError(t, fresh.Result(&got))
	require.Equal(t, "v2:parcel", got)

	markers := func(x *harvesttest.Execution) int {
		hist, err := x.History()
		require.NoError(t, err)
		n := 0
		for _, ev := range hist {
			if ev.Type == "VersionMarker" {
				n++
			}
		}
		return n
	}
	require.Zero(t, markers(old))
	require.Equal(t, 1, markers(fresh))
	// Each history replays against the code deployed now.
	require.NoError(t, old.Replay(order(true)))
	require.NoError(t, fresh.Replay(order(true)))
}
