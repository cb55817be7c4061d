package placement_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/placement"
)

func TestStartRouting(t *testing.T) {
	t.Parallel()
	const shards = 16
	// A minted workflow id lands on the shard of the key it was minted for,
	// so a later start that names it explicitly reaches the same shard.
	for i := range 200 {
		key := "evt-" + strings.Repeat("x", i%7) + string(rune('a'+i%26))
		shard := placement.StartShard(shards, "onboarding", "", key)
		id := placement.MintWorkflowID(shards, shard, "onboarding")
		require.Equal(t, shard, placement.StartShard(shards, "onboarding", id, ""))
		require.Equal(t, shard, placement.StartShard(shards, "onboarding", id, key), "an explicit id wins over the key")
	}
}
