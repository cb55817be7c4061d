package harvesttest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// TestTheKitChecksSearchAttributesAsADeploymentDoes: workflow code that
// upserts declared search attributes completes in the kit; one that sets
// an undeclared attribute fails its workflow task, as the scheduler
// fails it in a deployment, and waits.
func TestTheKitChecksSearchAttributesAsADeploymentDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "tagged", func(ctx *harvest.WorkflowContext, attr string) (string, error) {
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{attr: "eu"}); err != nil {
				return "", err
			}
			return "done", nil
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{SearchAttributes: map[string]map[string]string{"tagged": {"region": "keyword"}}})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "tagged", "region")
	require.NoError(t, err)
	var out string
	require.NoError(t, x.Result(&out))
	require.Equal(t, "done", out)

	bad, err := env.Start(ctx, "tagged", "planet")
	require.NoError(t, err, "the start is taken; its task fails on the scheduler")
	ex, err := bad.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, ex.Status)
	require.NotNil(t, ex.TaskFailing)
	require.Equal(t, "invalid_search_attribute", ex.TaskFailing.Reason)
	require.Contains(t, ex.TaskFailing.Message, "planet")
}
