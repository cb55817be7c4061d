package natstest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestClusterKeepsAReplicatedStreamThroughTheLossOfItsLeader(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	require.Equal(t, 3, c.Size())
	ctx := natstest.Context(t)
	_, js := natstest.ConnectURL(t, c.URL())

	// Tried again while the cluster, slowed down by the race detector,
	// sees a peer as offline for a moment.
	var s jetstream.Stream
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		var err error
		s, err = js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{Name: "R3", Subjects: []string{"r3.>"}, Replicas: 3})
		require.NoError(ct, err)
	}, 30*time.Second, 50*time.Millisecond)
	natstest.WaitReplicas(ctx, t, js, "R3", 3)
	// A publish is answered once the stream's interest has reached the
	// server the client is on; a leader elected anew, once elected.
	publish := func(id string) {
		t.Helper()
		require.EventuallyWithT(t, func(ct *assert.CollectT) {
			_, err := js.Publish(ctx, "r3.a", []byte(id), jetstream.WithMsgID(id))
			require.NoError(ct, err)
		}, 30*time.Second, 50*time.Millisecond)
	}
	publish("before")

	info, err := s.Info(ctx)
	require.NoError(t, err)
	leader := c.Index(info.Cluster.Leader)
	require.GreaterOrEqual(t, leader, 0, "the leader %q is a node", info.Cluster.Leader)
	c.Shutdown(leader)
	require.Nil(t, c.Server(leader))

	// The two left elect a leader and take writes.
	publish("during")

	// Back, it catches up.
	c.Restart(leader)
	require.NotNil(t, c.Server(leader))
	natstest.WaitReplicas(ctx, t, js, "R3", 3)
	info, err = s.Info(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 2, info.State.Msgs)
}
