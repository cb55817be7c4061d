package devstack_test

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAClusterNodeLostMidLoadLosesNothing runs the stack on a 3-node NATS
// cluster with every stream and bucket replicated 3 times, shuts down the
// node leading the command stream (or the task stream, or JetStream's
// meta group) while keyed
// starts arrive, brings it back, and checks exactness: one execution per
// key, every execution Completed, one WorkflowStarted and one
// WorkflowCompleted each, one ActivityCompleted per ActivityScheduled.
// Starts and keyed signals that arrive while the stream has no leader are
// answered 503 with Retry-After, never another 5xx, and succeed when
// retried; each signal is received once.
func TestAClusterNodeLostMidLoadLosesNothing(t *testing.T) {
	for _, stream := range []string{broker.CommandStream, broker.TaskStream, metaLeader} {
		t.Run(stream, func(t *testing.T) { loseLeaderMidLoad(t, stream) })
	}
}

// metaLeader names the JetStream meta leader (which places streams and
// consumers) as the leader to lose.
const metaLeader = "meta"

func loseLeaderMidLoad(t *testing.T, stream string) {
	cluster := natstest.RunCluster(t, 3)
	s := stacktest.Start(t, devstack.Config{NATSURL: cluster.URL(), Streams: broker.Config{Shards: 2, Replicas: 3}})
	ctx := natstest.Context(t)
	js, err := jetstream.New(s.NC())
	require.NoError(t, err)
	for _, name := range []string{broker.CommandStream, broker.TaskStream} {
		natstest.WaitReplicas(ctx, t, js, name, 3)
	}
	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)

	const (
		keys      = 40
		signalled = 10 // collect executions, signalled while the leader goes
	)
	var (
		mu          sync.Mutex
		executions  = map[string]string{} // key → execution id
		unavailable int
	)
	// retrying calls send until it succeeds; an error other than 503 with
	// Retry-After is the error it returns.
	retrying := func(what string, send func() error) error {
		deadline := time.Now().Add(time.Minute)
		for {
			err := send()
			if err == nil {
				return nil
			}
			var apiErr *client.APIError
			if errors.As(err, &apiErr) {
				if apiErr.StatusCode != http.StatusServiceUnavailable || apiErr.RetryAfter <= 0 {
					return fmt.Errorf("%s: want 2xx, or 503 with Retry-After, while a leader is elected: %w", what, err)
				}
				mu.Lock()
				unavailable++
				mu.Unlock()
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("%s kept failing: %w", what, err)
			}
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(100 * time.Millisecond): // the client's retry pace
			}
		}
	}
	// start sends key k's start until it is answered 2xx.
	start := func(k int) error {
		key := fmt.Sprintf("%s-%d", stream, k)
		return retrying("start "+key, func() error {
			run, err := c.Start(ctx, "onboarding", map[string]any{"user_id": k}, client.StartOptions{IdempotencyKey: key})
			if err == nil {
				mu.Lock()
				defer mu.Unlock()
				executions[key] = run.ExecutionID
			}
			return err
		})
	}
	// signal sends collect execution i its one item, keyed.
	var collects []string
	signal := func(i int) error {
		return retrying(fmt.Sprintf("signal %d", i), func() error {
			_, err := c.SendSignalIdempotent(ctx, collects[i], "item", map[string]any{"n": i}, fmt.Sprintf("%s-item-%d", stream, i))
			return err
		})
	}
	send := func(from, to int, signals bool) error {
		errs := make([]error, to-from)
		var wg sync.WaitGroup
		for k := from; k < to; k++ {
			wg.Go(func() { errs[k-from] = start(k) })
		}
		sigErrs := make([]error, len(collects))
		if signals {
			for i := range collects {
				wg.Go(func() { sigErrs[i] = signal(i) })
			}
		}
		wg.Wait()
		return errors.Join(append(errs, sigErrs...)...)
	}

	require.NoError(t, send(0, keys/2, false))
	for i := range signalled {
		run, err := c.Start(ctx, "collect", map[string]any{"count": 1}, client.StartOptions{IdempotencyKey: fmt.Sprintf("%s-collect-%d", stream, i)})
		require.NoError(t, err)
		collects = append(collects, run.ExecutionID)
	}
	probe.Until(t, 30*time.Second, "the collect executions to be created", func() bool {
		var n int
		require.NoError(t, s.DB.QueryRow(ctx, `SELECT count(*) FROM executions WHERE execution_id = ANY($1::uuid[])`, collects).Scan(&n))
		return n == signalled
	})
	leader := -1
	if stream == metaLeader {
		for i := range cluster.Size() {
			if srv := cluster.Server(i); srv != nil && srv.JetStreamIsLeader() {
				leader = i
			}
		}
	} else {
		info, err := js.Stream(ctx, stream)
		require.NoError(t, err)
		leader = cluster.Index(info.CachedInfo().Cluster.Leader)
	}
	require.GreaterOrEqual(t, leader, 0, "%s has a leader", stream)
	// The second half is in flight when the leader goes.
	sent := make(chan error, 1)
	go func() { sent <- send(keys/2, keys, true) }()
	cluster.Shutdown(leader)
	require.NoError(t, <-sent)
	cluster.Restart(leader)
	cluster.WaitReady()
	for _, name := range []string{broker.CommandStream, broker.TaskStream} {
		natstest.WaitReplicas(ctx, t, js, name, 3)
	}

	require.Len(t, executions, keys)
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		// What the stack holds when it did not converge.
		var open, outbox int
		_ = s.DB.QueryRow(context.Background(), `SELECT (SELECT count(*) FROM executions WHERE status <> 'Completed'), (SELECT count(*) FROM outbox)`).Scan(&open, &outbox)
		t.Logf("open executions %d, outbox rows %d", open, outbox)
		for _, name := range []string{broker.CommandStream, broker.TaskStream} {
			st, err := js.Stream(context.Background(), name)
			if err != nil {
				t.Logf("%s: %v", name, err)
				continue
			}
			info, _ := st.Info(context.Background())
			t.Logf("%s: msgs %d, leader %s, replicas %+v", name, info.State.Msgs, info.Cluster.Leader, info.Cluster.Replicas)
			for ci := range st.ListConsumers(context.Background()).Info() {
				t.Logf("  consumer %s: pending %d, ack pending %d, waiting %d, delivered %d, leader %s", ci.Name, ci.NumPending, ci.NumAckPending, ci.NumWaiting, ci.Delivered.Stream, ci.Cluster.Leader)
			}
		}
	})
	probe.Until(t, 90*time.Second, "every execution to complete", func() bool {
		var open int
		require.NoError(t, s.DB.QueryRow(ctx, `SELECT count(*) FROM executions WHERE status <> 'Completed'`).Scan(&open))
		return open == 0
	})
	var total, started, completed int
	require.NoError(t, s.DB.QueryRow(ctx, `SELECT
		(SELECT count(*) FROM executions),
		(SELECT count(*) FROM history_events WHERE type = 'WorkflowStarted'),
		(SELECT count(*) FROM history_events WHERE type = 'WorkflowCompleted')`).Scan(&total, &started, &completed))
	require.Equal(t, keys+signalled, total, "one execution per key")
	require.Equal(t, keys+signalled, started, "one WorkflowStarted each")
	require.Equal(t, keys+signalled, completed, "one WorkflowCompleted each")
	for _, id := range collects {
		var received int
		require.NoError(t, s.DB.QueryRow(ctx, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'SignalReceived'`, id).Scan(&received))
		require.Equal(t, 1, received, "collect %s received its keyed signal once", id)
	}
	rows, err := s.DB.Query(ctx, `SELECT execution_id::text,
		count(*) FILTER (WHERE type = 'ActivityScheduled'), count(*) FILTER (WHERE type = 'ActivityCompleted')
		FROM history_events GROUP BY execution_id`)
	require.NoError(t, err)
	defer rows.Close()
	for rows.Next() {
		var id string
		var scheduled, done int
		require.NoError(t, rows.Scan(&id, &scheduled, &done))
		require.Equal(t, scheduled, done, "one ActivityCompleted per ActivityScheduled in %s", id)
	}
	require.NoError(t, rows.Err())
	t.Logf("%s leader (node %d) shut down mid-load: %d keys and %d signals, %d answers 503 while it was elected", stream, leader, keys, signalled, unavailable)
}
