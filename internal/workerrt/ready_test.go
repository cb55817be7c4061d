package workerrt

import (
	"net"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// TestReadyFollowsTheConsumersAndNATS: a worker is ready once it is
// started (its consumers bound); not while the NATS server is down, and
// ready again once it is back.
func TestReadyFollowsTheConsumersAndNATS(t *testing.T) {
	dir := t.TempDir()
	ns := natstest.RunServer(t, natstest.Options{StoreDir: dir})
	port := ns.Addr().(*net.TCPAddr).Port // to restart it on
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	_, err := broker.Declare(ctx, js, broker.Config{Shards: 1})
	require.NoError(t, err)

	var rt *Runtime
	rt = runRuntime(t, nc, Registration{Workflows: []string{"hello"}, Activities: []string{"greet"}}, Handlers{
		Workflow:    func(string) (WorkflowFunc, bool) { return nil, false },
		HasActivity: func(string) bool { return false },
	}, func(rt *Runtime) {
		require.Equal(t, []string{"worker: not started"}, rt.Ready(ctx))
	})
	require.Empty(t, rt.Ready(ctx))
	names := map[string]bool{}
	for l := range rt.lanes() {
		names[rt.lanes()[l].consumer.name] = true
	}
	want := map[string]bool{"harvest_workflow_7_default_hello": true, "harvest_activity_7_default_greet": true,
		PinnedConsumerName("default", "hello", rt.buildID): true, broker.StickyConsumerName("default", "hello", rt.workerID): true}
	for _, p := range []string{"1", "2", "4", "5"} {
		want["harvest_workflow_7_default_hello_p"+p], want["harvest_activity_7_default_greet_p"+p] = true, true
	}
	require.Equal(t, want, names,
		"one consumer a name and priority, one of its executions pinned to this build and one of those this worker keeps; no consumer of unrouted tasks where none was left")

	ns.Shutdown()
	ns.WaitForShutdown()
	var reasons []string
	require.Eventually(t, func() bool {
		reasons = rt.Ready(ctx)
		return len(reasons) == 1 && strings.HasPrefix(reasons[0], "NATS: connection ")
	}, 10*time.Second, 20*time.Millisecond)
	natstest.RunServer(t, natstest.Options{Port: port, StoreDir: dir})
	require.Eventually(t, func() bool { return len(rt.Ready(ctx)) == 0 }, 20*time.Second, 20*time.Millisecond)
}
