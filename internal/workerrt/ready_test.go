package workerrt

import (
	"log/slog"
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/natstest"
	"github.com/harvest-engine/harvest/internal/streams"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestReadyFollowsTheConsumersAndNATS: a worker's task queue is ready once
// its consumers are bound; not while the NATS server is down, and ready
// again once it is back.
func TestReadyFollowsTheConsumersAndNATS(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{StoreDir: dir})
	port := ns.Addr().(*net.TCPAddr).Port // to restart it on
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := streams.Declare(ctx, js, streams.Config{Shards: 1})
	require.NoError(t, err)

	log := slog.New(slog.DiscardHandler)
	require.Equal(t, []string{
		"consumer harvest_worker_default_workflow: not in place",
		"consumer harvest_worker_default_activity: not in place",
	}, Ready(ctx, log, nc, wire.DefaultTaskQueue), "no consumers yet")

	runRuntime(t, nc, Handlers{
		Workflow:    func(string) (WorkflowFunc, bool) { return nil, false },
		HasActivity: func(string) bool { return false },
	})
	require.Empty(t, Ready(ctx, log, nc, wire.DefaultTaskQueue))

	ns.Shutdown()
	ns.WaitForShutdown()
	var reasons []string
	require.Eventually(t, func() bool {
		reasons = Ready(ctx, log, nc, wire.DefaultTaskQueue)
		return len(reasons) == 1 && strings.HasPrefix(reasons[0], "NATS: connection ")
	}, 10*time.Second, 20*time.Millisecond)
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: dir})
	require.Eventually(t, func() bool { return len(Ready(ctx, log, nc, wire.DefaultTaskQueue)) == 0 }, 20*time.Second, 20*time.Millisecond)
}
