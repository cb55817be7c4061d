package devstack_test

import (
	"context"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/wire"
)

// lastCommandSeq is the command stream's last sequence: it grows with
// every command published.
func lastCommandSeq(t *testing.T, s *devstack.Stack) uint64 {
	t.Helper()
	info, err := commandStream(t, s).Info(natstest.Context(t))
	require.NoError(t, err)
	return info.State.LastSeq
}

// echoWorker starts a worker of its own, on a connection of its own,
// serving the workflows named, each returning its input.
func echoWorker(t *testing.T, s *devstack.Stack, names ...string) (*harvest.Worker, *nats.Conn) {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, ShutdownGrace: 5 * time.Second})
	require.NoError(t, err)
	for _, name := range names {
		harvest.RegisterWorkflow(w, name, func(_ *harvest.WorkflowContext, in any) (any, error) { return in, nil })
	}
	require.NoError(t, w.Start(natstest.Context(t)))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, nc
}

// consolePage is the web console's page of an execution.
func consolePage(t *testing.T, s *devstack.Stack, id string) string {
	t.Helper()
	resp, err := http.Get(s.URL() + "/ui/executions/" + id)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", body)
	return string(body)
}

func describe(t *testing.T, s *devstack.Stack, id string) answer {
	t.Helper()
	a := call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
	require.Equal(t, 200, a.status, a.body)
	return a
}

// TestAStartOfAWorkflowNoWorkerServesIsRefused: the first hour's typo is
// answered 404 unknown_workflow and publishes nothing; a workflow a
// worker registers is started (right after the worker starts), and one
// the configuration declares is started with no worker, its execution
// saying it waits for one until a worker comes. A worker that stops
// takes its registration with it; a keyed replay of a start it had
// committed is still answered with its execution.
func TestAStartOfAWorkflowNoWorkerServesIsRefused(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Ingest: ingest.Config{DeclaredWorkflows: []string{"reg_declared"}}})

	before := lastCommandSeq(t, s)
	for _, key := range []string{"", "typo-1"} {
		a := start(t, s, "nosuch", key, `{"input": {}}`)
		require.Equal(t, 404, a.status, a.body)
		require.Equal(t, "unknown_workflow", a.body["error"])
		require.Contains(t, a.body["message"], `no worker serves workflow "nosuch" on task queue "default" and the configuration does not declare it`)
	}
	swst := call(t, "POST", s.URL()+"/api/harvest/workflows/nosuch/signal-with-start", nil,
		`{"workflow_id": "o-1", "signal_name": "item"}`)
	require.Equal(t, 404, swst.status, swst.body)
	require.Equal(t, "unknown_workflow", swst.body["error"])
	run := createRun(t, s, "", `{"workflow": "nosuch"}`)
	require.Equal(t, 404, run.status, run.body)
	require.Equal(t, "unknown_workflow", run.body["error"])
	require.Equal(t, before, lastCommandSeq(t, s), "nothing was published")

	// Declared, no worker: started, and waiting for a worker.
	d := start(t, s, "reg_declared", "", `{"input": {"n": 1}}`)
	require.Equal(t, 201, d.status, d.body)
	declaredID := d.body["execution_id"].(string)
	require.Equal(t, true, describe(t, s, declaredID).body["waiting_for_worker"])
	require.Contains(t, consolePage(t, s, declaredID), `id="waiting-for-worker"`, "the console says so")
	onboarding := start(t, s, "onboarding", "", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, onboarding.status, onboarding.body)
	require.NotContains(t, describe(t, s, onboarding.body["execution_id"].(string)).body, "waiting_for_worker",
		"the stack's worker serves the examples")
	require.NotContains(t, consolePage(t, s, onboarding.body["execution_id"].(string)), `id="waiting-for-worker"`)

	// A worker registers; a start right after it is accepted.
	w, _ := echoWorker(t, s, "reg_declared", "reg_late")
	late := start(t, s, "reg_late", "late-1", `{"input": {"n": 2}}`)
	require.Equal(t, 201, late.status, late.body)
	lateID := late.body["execution_id"].(string)
	waitCompleted(t, s, declaredID)
	waitCompleted(t, s, lateID)
	require.NotContains(t, describe(t, s, declaredID).body, "waiting_for_worker", "a closed execution waits for nothing")

	// It stops: its registrations go at once.
	require.NoError(t, w.Stop(natstest.Context(t)))
	ok, err := registry.Lookup(natstest.Context(t), s.Topology.Workers, registry.KindWorkflow, "reg_late", wire.DefaultTaskQueue, time.Now())
	require.NoError(t, err)
	require.False(t, ok, "a worker that stops removes its registration")
	eventually(t, 10*time.Second, "reg_late to be unknown", func() bool {
		a := start(t, s, "reg_late", "", `{"input": {}}`)
		if a.status == 201 { // the index had not seen the removal yet
			return false
		}
		require.Equal(t, 404, a.status, a.body)
		return true
	})
	// A keyed replay of the start it committed is answered first.
	replay := start(t, s, "reg_late", "late-1", `{"input": {"n": 2}}`)
	require.Equal(t, 200, replay.status, replay.body)
	require.Equal(t, lateID, replay.body["execution_id"])
	require.Equal(t, true, replay.body["deduplicated"])
	fresh := start(t, s, "reg_late", "late-2", `{"input": {"n": 2}}`)
	require.Equal(t, 404, fresh.status, fresh.body)

	// Still declared: started, waiting again.
	again := start(t, s, "reg_declared", "", `{"input": {"n": 3}}`)
	require.Equal(t, 201, again.status, again.body)
	eventually(t, 10*time.Second, "the execution to wait for a worker", func() bool {
		return describe(t, s, again.body["execution_id"].(string)).body["waiting_for_worker"] == true
	})
}

// TestAVanishedWorkersRegistrationLapses: a worker that vanishes without
// stopping (its connection cut) leaves a registration that lapses within
// the TTL; then its workflow is unknown.
func TestAVanishedWorkersRegistrationLapses(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Streams: broker.Config{WorkerTTL: 1500 * time.Millisecond}})
	// The test's own worker runs the tasks.
	require.NoError(t, s.Worker().Stop(natstest.Context(t)))
	_, nc := echoWorker(t, s, "reg_vanish")
	a := start(t, s, "reg_vanish", "", `{"input": {}}`)
	require.Equal(t, 201, a.status, a.body)
	waitCompleted(t, s, a.body["execution_id"].(string))

	nc.Close() // the worker can neither renew nor remove its keys
	eventually(t, 15*time.Second, "reg_vanish to be unknown", func() bool {
		ok, err := registry.Lookup(natstest.Context(t), s.Topology.Workers, registry.KindWorkflow, "reg_vanish", wire.DefaultTaskQueue, time.Now())
		require.NoError(t, err)
		return !ok
	})
	b := start(t, s, "reg_vanish", "", `{"input": {}}`)
	require.Equal(t, 404, b.status, b.body)
	require.Equal(t, "unknown_workflow", b.body["error"])
}

// TestAnActivityNoWorkerRegistersIsVisibleAtOnce: an execution waiting
// for an activity no live worker registers (a misspelt name) says so on
// describe at once, not when the attempt's start-to-close runs out; one
// that a worker serves is not listed.
func TestAnActivityNoWorkerRegistersIsVisibleAtOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "misspelt", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "chrage_card", nil).Get(&out)
			return out, err
		})
	}})
	id := start(t, s, "misspelt", "", `{}`).body["execution_id"].(string)
	eventually(t, 30*time.Second, "the execution to wait for chrage_card", func() bool {
		waiting, _ := describe(t, s, id).body["waiting_for_activity_workers"].([]any)
		return len(waiting) == 1 && waiting[0] == "chrage_card"
	})
	onboarding := start(t, s, "onboarding", "", `{"input": {"user_id": 7}}`)
	require.NotContains(t, describe(t, s, onboarding.body["execution_id"].(string)).body, "waiting_for_activity_workers")
}
