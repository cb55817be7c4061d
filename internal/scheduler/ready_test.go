package scheduler

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestReadyFollowsNATSAndTheShards: a scheduler is ready once its shards'
// consumers are in place; not while the NATS server is down, and ready
// again once it is back; not while a shard's applies keep failing; not
// before Start nor after Stop.
func TestReadyFollowsNATSAndTheShards(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{StoreDir: dir})
	port := ns.Addr().(*net.TCPAddr).Port // to restart it on
	_, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	s, err := New(Config{DB: pgtest.NewPool(t), Topology: top, LeaseTTL: time.Second, Metrics: reg})
	require.NoError(t, err)
	require.Equal(t, []string{"scheduler: not started"}, s.Ready(ctx))

	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	probe.Until(t, 20*time.Second, "the scheduler to be ready", func() bool { return len(s.Ready(ctx)) == 0 })
	require.Len(t, s.OwnedShards(), 2)
	n, err := testutil.GatherAndCount(reg, "harvest_scheduler_shards_owned", "harvest_scheduler_failing_shards", "harvest_scheduler_shards_failing", "harvest_scheduler_commands_total")
	require.NoError(t, err)
	require.Equal(t, 3+len(commandKindNames())+1, n, "the commands' series are by kind, and other")
	require.Equal(t, 2.0, testutil.ToFloat64(s.metrics.owned))

	ns.Shutdown()
	ns.WaitForShutdown()
	var reasons []string
	probe.Until(t, 20*time.Second, "NATS to be reported down", func() bool {
		reasons = s.Ready(ctx)
		return len(reasons) > 0 && strings.HasPrefix(reasons[0], "NATS: connection ")
	})
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: dir})
	probe.Until(t, 30*time.Second, "the scheduler to be ready again", func() bool {
		reasons = s.Ready(ctx)
		return len(reasons) == 0
	})

	// A shard whose applies have kept failing (as markFailing records it)
	// is a reason; one that has just started failing is not yet.
	s.mu.Lock()
	r := s.runners[1]
	s.mu.Unlock()
	r.failure.Store(&shardFailure{since: time.Now()})
	require.Empty(t, s.Ready(ctx))
	since := time.Now().Add(-failingAfter - time.Second)
	r.failure.Store(&shardFailure{since: since})
	require.Equal(t, []string{"shard 1: applies failing since " + since.UTC().Format(time.RFC3339) + " (the error is in the scheduler's log)"}, s.Ready(ctx))
	r.failure.Store(nil)

	require.NoError(t, s.Stop(ctx))
	require.Equal(t, []string{"scheduler: stopped"}, s.Ready(ctx))
}
