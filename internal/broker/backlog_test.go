package broker_test

import (
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestTaskBacklogCountsATaskQueuesTasksByName: the tasks of one queue,
// by kind and name, with the unrouted ones (written before routing by
// name) by kind; another queue's and subjects of an unknown kind are
// left out; a task leaves the count once a worker acknowledges it.
func TestTaskBacklogCountsATaskQueuesTasksByName(t *testing.T) {
	t.Parallel()
	_, js := natstest.Connect(t, natstest.RunServer(t, natstest.Options{}))
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)

	b, err := top.TaskBacklog(ctx, "billing")
	require.NoError(t, err)
	require.Empty(t, b.Named)
	require.Empty(t, b.Unrouted)

	for _, subject := range []string{
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "charge"),
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "charge"),
		broker.NameTaskSubject("billing", wire.TaskWorkflow, "refund"),
		broker.PinnedTaskSubject("billing", "refund", "v1.2.0+abc~12345678"),
		broker.NameTaskSubject("billing", wire.TaskActivity, "charge_card"),
		broker.PriorityTaskSubject("billing", wire.TaskActivity, "charge_card", 5),
		broker.PriorityTaskSubject("billing", wire.TaskWorkflow, "refund", 1),
		broker.TaskSubject("billing", wire.TaskWorkflow),
		broker.TaskSubject("billing", wire.TaskWorkflow),
		broker.TaskSubject("billing", wire.TaskActivity),
		broker.NameTaskSubject("default", wire.TaskWorkflow, "charge"),
		broker.NameTaskSubject("billing_eu", wire.TaskWorkflow, "charge"),
		"harvest.task.billing.query.charge",
	} {
		_, err := js.Publish(ctx, subject, []byte("{}"))
		require.NoError(t, err)
	}
	b, err = top.TaskBacklog(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, map[string]map[string]uint64{
		wire.TaskWorkflow: {"charge": 2, "refund": 3},
		wire.TaskActivity: {"charge_card": 2},
	}, b.Named, "a pinned task counts for its workflow, a task of another priority for its name")
	require.Equal(t, map[string]uint64{wire.TaskWorkflow: 2, wire.TaskActivity: 1}, b.Unrouted)

	// A worker takes the activity task and settles it.
	s, err := js.Stream(ctx, broker.TaskStream)
	require.NoError(t, err)
	c, err := s.CreateConsumer(ctx, jetstream.ConsumerConfig{Durable: "backlog_test", AckPolicy: jetstream.AckExplicitPolicy,
		FilterSubject: broker.NameTaskSubject("billing", wire.TaskActivity, "charge_card")})
	require.NoError(t, err)
	msgs, err := c.Fetch(1, jetstream.FetchMaxWait(5*time.Second))
	require.NoError(t, err)
	for m := range msgs.Messages() {
		b, err = top.TaskBacklog(ctx, "billing")
		require.NoError(t, err)
		require.Equal(t, uint64(2), b.Named[wire.TaskActivity]["charge_card"], "a task being run is counted")
		require.NoError(t, m.DoubleAck(ctx))
	}
	require.NoError(t, msgs.Error())
	b, err = top.TaskBacklog(ctx, "billing")
	require.NoError(t, err)
	require.Equal(t, uint64(1), b.Named[wire.TaskActivity]["charge_card"], "a settled task leaves")
	require.Equal(t, map[string]uint64{"charge": 2, "refund": 3}, b.Named[wire.TaskWorkflow])
}
