package devstack_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestStackShardCount checks the shard count a stack picks: DefaultShards
// for new streams, and the count the streams were created with otherwise.
func TestStackShardCount(t *testing.T) {
	t.Parallel()
	require.Equal(t, devstack.DefaultShards, stacktest.Start(t, devstack.Config{}).Topology.Shards())

	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	_, err := broker.Declare(t.Context(), js, broker.Config{Shards: 3})
	require.NoError(t, err)
	require.Equal(t, 3, stacktest.Start(t, devstack.Config{NATSURL: ns.ClientURL()}).Topology.Shards())
}
