package harvesttest_test

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/harvesttest"
)

// TestTheDeprecatedOptionsStillWork: the functional options of the last
// release return the options structs and combine as they always did,
// until they are removed. This is the one place the repository uses
// them.
//
//nolint:staticcheck // SA1019: the deprecated forms' own test.
func TestTheDeprecatedOptionsStillWork(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	require.Equal(t, harvesttest.StartOptions{IdempotencyKey: "k"}, harvesttest.IdempotencyKey("k"))
	require.Equal(t, harvesttest.StartOptions{WorkflowID: "w"}, harvesttest.WorkflowID("w"))
	require.Equal(t, harvesttest.StartOptions{ReusePolicy: client.ReuseRejectDuplicate}, harvesttest.ReusePolicy(client.ReuseRejectDuplicate))
	require.Equal(t, harvesttest.SignalOptions{IdempotencyKey: "s"}, harvesttest.SignalKey("s"))
	var _ harvesttest.StartOption = harvesttest.StartOptions{}
	var _ harvesttest.SignalOption = harvesttest.SignalOptions{}

	env := newEnv(t, examples.NewServices())
	first, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.IdempotencyKey("order-1"))
	require.NoError(t, err)
	again, err := env.Start(ctx, examples.WorkflowCharge, charge, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	require.NoError(t, err)
	require.True(t, again.Deduplicated, "the old form and the struct key the same start")
	require.Equal(t, first.ID, again.ID)

	x, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 2}, harvesttest.WorkflowID("order-9"),
		harvesttest.ReusePolicy(client.ReuseRejectDuplicate))
	require.NoError(t, err)
	require.Equal(t, "order-9", x.WorkflowID)
	delivered, err := x.Signal(ctx, "item", "a", harvesttest.SignalKey("item-a"))
	require.NoError(t, err)
	require.True(t, delivered)
	delivered, err = x.Signal(ctx, "item", "a", harvesttest.SignalOptions{IdempotencyKey: "item-a"})
	require.NoError(t, err)
	require.False(t, delivered, "the old form and the struct key the same signal")
}

// TestSeveralStartOptionsMerge: should a test give several StartOptions,
// each one's non-empty fields override the earlier ones'.
func TestSeveralStartOptionsMerge(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env := newEnv(t, examples.NewServices())
	x, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1},
		harvesttest.StartOptions{WorkflowID: "order-1", IdempotencyKey: "k-1"}, harvesttest.StartOptions{WorkflowID: "order-2"})
	require.NoError(t, err)
	require.Equal(t, "order-2", x.WorkflowID)
	again, err := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, harvesttest.StartOptions{IdempotencyKey: "k-1"})
	require.NoError(t, err)
	require.True(t, again.Deduplicated, "the first StartOptions' key was kept")
	require.Equal(t, x.ID, again.ID)
}
