package broker_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestDeclareRefusesReplicasASingleServerCannotPlace(t *testing.T) {
	ns := natstest.RunServer(t, natstest.Options{})
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)

	check := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, broker.ErrReplicasUnplaceable)
		var re *broker.ReplicasError
		require.ErrorAs(t, err, &re)
		require.Equal(t, broker.ReplicasError{Stream: broker.CommandStream, Replicas: 3, ClusterSize: 1, Err: re.Err}, *re)
		require.ErrorContains(t, err, "stream HARVEST_CMD: 3 replicas cannot be placed on a NATS server that is not clustered (cluster size 1)")
		require.ErrorContains(t, err, "replicas > 1 not supported in non-clustered mode", "JetStream's own answer")
	}
	_, err := broker.Declare(ctx, js, broker.Config{Shards: 2, Replicas: 3})
	check(err)
	// Nor on a deployment declared with one replica, which keeps it.
	_, err = broker.Declare(ctx, js, broker.Config{Shards: 2})
	require.NoError(t, err)
	_, err = broker.Declare(ctx, js, broker.Config{Shards: 2, Replicas: 3})
	check(err)
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 1)
	}
}

func TestDeclareReplicatesEveryStreamAndBucketOnACluster(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.ConnectURL(t, c.URL())
	ctx := natstest.Context(t)

	top := declare(ctx, t, js, broker.Config{Shards: 2, Replicas: 3})
	var names []string
	for name := range js.StreamNames(ctx).Name() {
		names = append(names, name)
	}
	require.ElementsMatch(t, broker.DeclaredStreams(), names, "DeclaredStreams names what Declare creates")
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 3)
	}
	cmd := &wire.Command{CommandID: "c-r3", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: "x", TaskQueue: "default"}}
	_, err := top.PublishCommand(ctx, 1, cmd)
	require.NoError(t, err)

	// More replicas than servers: the error names the stream and the
	// cluster's size.
	_, err = broker.Declare(ctx, js, broker.Config{Shards: 2, Replicas: 5})
	require.ErrorIs(t, err, broker.ErrReplicasUnplaceable)
	var re *broker.ReplicasError
	require.ErrorAs(t, err, &re)
	require.Equal(t, broker.ReplicasError{Stream: broker.CommandStream, Replicas: 5, Clustered: true, ClusterSize: 3, Err: re.Err}, *re)
	require.ErrorContains(t, err, "stream HARVEST_CMD: 5 replicas cannot be placed on a NATS cluster of 3 servers: ")
	require.ErrorContains(t, err, "no suitable peers for placement", "JetStream's own answer")
}

func TestDeclareChangesTheReplicasOfAnExistingDeploymentInPlace(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.ConnectURL(t, c.URL())
	ctx := natstest.Context(t)

	top := declare(ctx, t, js, broker.Config{Shards: 2})
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 1)
	}
	// What the deployment holds: a command, an effect in the ledger, and a
	// consumer that leaves its replicas to its stream.
	cmd := &wire.Command{CommandID: "c-kept", Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "w", WorkflowID: "x", TaskQueue: "default"}}
	_, err := top.PublishCommand(ctx, 1, cmd)
	require.NoError(t, err)
	// Answered once the bucket's interest has reached the client's server.
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		_, err := top.Ledger.Put(ctx, "effect", []byte("done"))
		require.NoError(ct, err)
	}, 30*time.Second, 50*time.Millisecond)
	cons, err := js.CreateOrUpdateConsumer(ctx, broker.CommandStream, jetstream.ConsumerConfig{
		Durable: "shard-1", FilterSubject: broker.CommandFilter(1), AckPolicy: jetstream.AckExplicitPolicy,
	})
	require.NoError(t, err)

	top = declare(ctx, t, js, broker.Config{Shards: 2, Replicas: 3})
	// JetStream moves a stream that holds messages to its new peers once
	// they have caught up, or after a grace period (10s in nats-server
	// 2.15); its consumers follow.
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 3)
	}
	natstest.WaitConsumerReplicas(ctx, t, js, broker.CommandStream, "shard-1", 3)
	entry, err := top.Ledger.Get(ctx, "effect")
	require.NoError(t, err)
	require.Equal(t, "done", string(entry.Value()))
	msg, err := cons.Next(jetstream.FetchMaxWait(10 * time.Second))
	require.NoError(t, err)
	require.Contains(t, string(msg.Data()), "c-kept")

	// And back.
	declare(ctx, t, js, broker.Config{Shards: 2, Replicas: 1})
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 1)
	}
	natstest.WaitConsumerReplicas(ctx, t, js, broker.CommandStream, "shard-1", 1)
}

// declare is broker.Declare on a cluster, tried again while the cluster
// cannot answer: one slowed down by the race detector may leave a request
// unanswered, or see a peer as offline for a moment (and refuse to place
// replicas on it). service.ConnectNATS tries again alike.
func declare(ctx context.Context, t *testing.T, js jetstream.JetStream, cfg broker.Config) *broker.Topology {
	t.Helper()
	var top *broker.Topology
	require.EventuallyWithT(t, func(ct *assert.CollectT) {
		actx, cancel := context.WithTimeout(ctx, 15*time.Second)
		defer cancel()
		var err error
		top, err = broker.Declare(actx, js, cfg)
		require.NoError(ct, err)
	}, time.Minute, 100*time.Millisecond)
	return top
}

func TestDeclareRetryingPlacesReplicasWithAServerDownButFailsWithTooFewServers(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	_, js := natstest.ConnectURL(t, c.URL())
	ctx := natstest.Context(t)

	// A server of the cluster is down: JetStream places three replicas
	// anyway (a quorum of two is up), and the third catches up when its
	// server is back.
	c.Shutdown(2)
	c.WaitReady()
	_, err := broker.DeclareRetrying(ctx, js, broker.Config{Shards: 2, Replicas: 3}, nil)
	require.NoError(t, err)
	c.Restart(2)
	for _, name := range broker.DeclaredStreams() {
		natstest.WaitReplicas(ctx, t, js, name, 3)
	}

	// Five replicas on three servers, all online: start-up fails once the
	// settle period has passed, naming the stream and the cluster's size.
	began := time.Now()
	var waited []error
	_, err = broker.DeclareRetrying(ctx, js, broker.Config{Shards: 2, Replicas: 5}, func(err error) { waited = append(waited, err) })
	took := time.Since(began)
	require.ErrorIs(t, err, broker.ErrReplicasUnplaceable)
	require.ErrorContains(t, err, "stream HARVEST_CMD: 5 replicas cannot be placed on a NATS cluster of 3 servers")
	require.GreaterOrEqual(t, took, broker.UnplaceableSettle, "a cluster still forming has time to gather its servers")
	require.NotEmpty(t, waited, "each refusal before giving up is reported as waiting")
	t.Logf("gave up on 5 replicas after %s and %d refusals", took.Round(time.Millisecond), len(waited))
}

// Processes start together: two declaring a fresh deployment at once on a
// cluster are both answered. With CreateOrUpdateStream every attempt of
// both ran into its timeout, two or three times each; a cluster still
// settling may leave one request unanswered now and then, which costs an
// attempt, not more.
func TestConcurrentDeclaresOnAClusterAreAnswered(t *testing.T) {
	c := natstest.RunCluster(t, 3)
	ctx := natstest.Context(t)
	for round, cfg := range []broker.Config{{Shards: 4, Replicas: 3}, {Shards: 4, Replicas: 1}, {Shards: 4, Replicas: 3}} {
		var wg sync.WaitGroup
		for i := range 2 {
			_, js := natstest.ConnectURL(t, c.URL())
			wg.Go(func() {
				failed := 0
				_, err := broker.DeclareRetrying(ctx, js, cfg, func(err error) {
					failed++
					t.Logf("round %d, process %d: an attempt failed: %v", round, i, err)
				})
				assert.NoError(t, err)
				assert.LessOrEqual(t, failed, 1, "round %d, process %d: attempts abandoned", round, i)
			})
		}
		wg.Wait()
		_, js := natstest.ConnectURL(t, c.URL())
		for _, name := range broker.DeclaredStreams() {
			natstest.WaitReplicas(ctx, t, js, name, cfg.Replicas)
		}
	}
}
