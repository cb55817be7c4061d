package harvest_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/natstest"
	"github.com/harvest-engine/harvest/internal/streams"
)

func TestWorkerBindsToTheDeployedStreamsAndNeverDeclaresThem(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	_, err := harvest.NewWorker(harvest.WorkerConfig{})
	require.ErrorContains(t, err, "NATS is required")

	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc})
	require.NoError(t, err)
	require.ErrorIs(t, w.Start(ctx), harvest.ErrNotDeclared)
	n, err := streams.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Zero(t, n, "a worker declares nothing")

	_, err = streams.Declare(ctx, js, streams.Config{Shards: 3})
	require.NoError(t, err)
	w, err = harvest.NewWorker(harvest.WorkerConfig{NATS: nc})
	require.NoError(t, err)
	require.NoError(t, w.Start(ctx))
	require.NoError(t, w.Stop(ctx))
	n, err = streams.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Equal(t, 3, n)
}
