package harvest_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

func TestWorkerBindsToTheDeployedStreamsAndNeverDeclaresThem(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	_, err := harvest.NewWorker(harvest.WorkerConfig{})
	require.ErrorContains(t, err, "NATS is required")

	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc})
	require.NoError(t, err)
	harvest.RegisterWorkflow(w, "hello", func(*harvest.WorkflowContext, struct{}) (string, error) { return "hello", nil })
	require.ErrorIs(t, w.Start(ctx), harvest.ErrNotDeclared)
	n, err := broker.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Zero(t, n, "a worker declares nothing")

	_, err = broker.Declare(ctx, js, broker.Config{Shards: 3})
	require.NoError(t, err)
	// A Start that failed is retried on the same worker: here the task
	// stream's consumer cannot be made while another holds its subject,
	// after the worker bound the streams.
	blocker, err := js.CreateConsumer(ctx, broker.TaskStream, jetstream.ConsumerConfig{
		Durable: "blocker", FilterSubject: broker.TaskQueueFilter("default"), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)
	err = w.Start(ctx)
	require.Error(t, err)
	require.NotErrorIs(t, err, harvest.ErrRegistration, "reaching the streams may succeed later")
	require.NoError(t, js.DeleteConsumer(ctx, broker.TaskStream, blocker.CachedInfo().Name))
	require.NoError(t, w.Start(ctx))
	require.NoError(t, w.Stop(ctx))
	n, err = broker.DeployedShards(ctx, js)
	require.NoError(t, err)
	require.Equal(t, 3, n)
}

func TestAWorkerWithARefusedRegistrationDoesNotStart(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	nc, _ := natstest.Connect(t, ns)
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc})
	require.NoError(t, err)
	echo := func(_ *harvest.ActivityContext, in string) (string, error) { return in, nil }
	harvest.RegisterActivity(w, "echo", echo)
	harvest.RegisterActivity(w, "echo", echo)
	err = w.Start(natstest.Context(t))
	require.ErrorIs(t, err, harvest.ErrRegistration)
	require.ErrorContains(t, err, `register activity "echo": already registered`)
}

// TestAWorkerConnectsToHARVEST_NATS_URL: given no connection, a worker
// connects to HARVEST_NATS_URL (what harvest dev prints), and Stop closes
// that connection; with neither it says what to do.
func TestAWorkerConnectsToHARVEST_NATS_URL(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)

	t.Setenv(harvest.EnvNATSURL, "")
	_, err = harvest.NewWorker(harvest.WorkerConfig{})
	require.ErrorContains(t, err, "set HARVEST_NATS_URL")

	t.Setenv(harvest.EnvNATSURL, ns.ClientURL())
	w, err := harvest.NewWorker(harvest.WorkerConfig{})
	require.NoError(t, err)
	harvest.RegisterWorkflow(w, "hello", func(_ *harvest.WorkflowContext, in string) (string, error) { return in, nil })
	require.NoError(t, w.Start(ctx))
	require.NoError(t, w.Stop(ctx))
	require.Eventually(t, func() bool { return ns.NumClients() == 1 }, 10*time.Second, 10*time.Millisecond,
		"the worker's own connection is closed; the test's stays")

	t.Setenv(harvest.EnvNATSURL, "nats://127.0.0.1:1")
	_, err = harvest.NewWorker(harvest.WorkerConfig{})
	require.ErrorContains(t, err, "connect to HARVEST_NATS_URL")
}
