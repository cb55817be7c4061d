package ingest_test

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
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
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

func describe(t *testing.T, s *devstack.Stack, id string) stacktest.Answer {
	t.Helper()
	a := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
	require.Equal(t, 200, a.Status, a.Body)
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
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{DeclaredWorkflows: []string{"reg_declared"}}})

	before := lastCommandSeq(t, s)
	for _, key := range []string{"", "typo-1"} {
		a := stacktest.StartWorkflow(t, s, "nosuch", key, `{"input": {}}`)
		require.Equal(t, 404, a.Status, a.Body)
		require.Equal(t, "unknown_workflow", a.Body["error"])
		require.Contains(t, a.Body["message"], `no worker serves workflow "nosuch" on task queue "default" and the configuration does not declare it`)
	}
	swst := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/nosuch/signal-with-start", nil,
		`{"workflow_id": "o-1", "signal_name": "item"}`)
	require.Equal(t, 404, swst.Status, swst.Body)
	require.Equal(t, "unknown_workflow", swst.Body["error"])
	run := createRun(t, s, "", `{"workflow": "nosuch"}`)
	require.Equal(t, 404, run.Status, run.Body)
	require.Equal(t, "unknown_workflow", run.Body["error"])
	require.Equal(t, before, lastCommandSeq(t, s), "nothing was published")

	// Declared, no worker: started, and waiting for a worker.
	d := stacktest.StartWorkflow(t, s, "reg_declared", "", `{"input": {"n": 1}}`)
	require.Equal(t, 201, d.Status, d.Body)
	declaredID := d.Body["execution_id"].(string)
	require.Equal(t, true, describe(t, s, declaredID).Body["waiting_for_worker"])
	require.Contains(t, consolePage(t, s, declaredID), `id="waiting-for-worker"`, "the console says so")
	onboarding := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, onboarding.Status, onboarding.Body)
	require.NotContains(t, describe(t, s, onboarding.Body["execution_id"].(string)).Body, "waiting_for_worker",
		"the stack's worker serves the examples")
	require.NotContains(t, consolePage(t, s, onboarding.Body["execution_id"].(string)), `id="waiting-for-worker"`)

	// A worker registers; a start right after it is accepted.
	w, _ := echoWorker(t, s, "reg_declared", "reg_late")
	late := stacktest.StartWorkflow(t, s, "reg_late", "late-1", `{"input": {"n": 2}}`)
	require.Equal(t, 201, late.Status, late.Body)
	lateID := late.Body["execution_id"].(string)
	stacktest.WaitCompleted(t, s, declaredID)
	stacktest.WaitCompleted(t, s, lateID)
	require.NotContains(t, describe(t, s, declaredID).Body, "waiting_for_worker", "a closed execution waits for nothing")

	// It stops: its registrations go at once.
	require.NoError(t, w.Stop(natstest.Context(t)))
	ok, err := registry.Lookup(natstest.Context(t), s.Topology.Workers, registry.KindWorkflow, "reg_late", wire.DefaultTaskQueue, time.Now())
	require.NoError(t, err)
	require.False(t, ok, "a worker that stops removes its registration")
	probe.Until(t, 10*time.Second, "reg_late to be unknown", func() bool {
		a := stacktest.StartWorkflow(t, s, "reg_late", "", `{"input": {}}`)
		if a.Status == 201 { // the index had not seen the removal yet
			return false
		}
		require.Equal(t, 404, a.Status, a.Body)
		return true
	})
	// A keyed replay of the start it committed is answered first.
	replay := stacktest.StartWorkflow(t, s, "reg_late", "late-1", `{"input": {"n": 2}}`)
	require.Equal(t, 200, replay.Status, replay.Body)
	require.Equal(t, lateID, replay.Body["execution_id"])
	require.Equal(t, true, replay.Body["deduplicated"])
	fresh := stacktest.StartWorkflow(t, s, "reg_late", "late-2", `{"input": {"n": 2}}`)
	require.Equal(t, 404, fresh.Status, fresh.Body)

	// Still declared: started, waiting again.
	again := stacktest.StartWorkflow(t, s, "reg_declared", "", `{"input": {"n": 3}}`)
	require.Equal(t, 201, again.Status, again.Body)
	probe.Until(t, 10*time.Second, "the execution to wait for a worker", func() bool {
		return describe(t, s, again.Body["execution_id"].(string)).Body["waiting_for_worker"] == true
	})
}

// TestAVanishedWorkersRegistrationLapses: a worker that vanishes without
// stopping (its connection cut) leaves a registration that lapses within
// the TTL; then its workflow is unknown.
func TestAVanishedWorkersRegistrationLapses(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Streams: broker.Config{WorkerTTL: 1500 * time.Millisecond}})
	// The test's own worker runs the tasks.
	require.NoError(t, s.Worker().Stop(natstest.Context(t)))
	_, nc := echoWorker(t, s, "reg_vanish")
	a := stacktest.StartWorkflow(t, s, "reg_vanish", "", `{"input": {}}`)
	require.Equal(t, 201, a.Status, a.Body)
	stacktest.WaitCompleted(t, s, a.Body["execution_id"].(string))

	nc.Close() // the worker can neither renew nor remove its keys
	probe.Until(t, 15*time.Second, "reg_vanish to be unknown", func() bool {
		ok, err := registry.Lookup(natstest.Context(t), s.Topology.Workers, registry.KindWorkflow, "reg_vanish", wire.DefaultTaskQueue, time.Now())
		require.NoError(t, err)
		return !ok
	})
	b := stacktest.StartWorkflow(t, s, "reg_vanish", "", `{"input": {}}`)
	require.Equal(t, 404, b.Status, b.Body)
	require.Equal(t, "unknown_workflow", b.Body["error"])
}

// TestAnActivityNoWorkerRegistersIsVisibleAtOnce: an execution waiting
// for an activity no live worker registers (a misspelt name) says so on
// describe at once, not when the attempt's start-to-close runs out; one
// that a worker serves is not listed.
func TestAnActivityNoWorkerRegistersIsVisibleAtOnce(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "misspelt", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "chrage_card", nil).Get(&out)
			return out, err
		})
	}})
	id := stacktest.StartWorkflow(t, s, "misspelt", "", `{}`).Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "the execution to wait for chrage_card", func() bool {
		waiting, _ := describe(t, s, id).Body["waiting_for_activity_workers"].([]any)
		return len(waiting) == 1 && waiting[0] == "chrage_card"
	})
	onboarding := stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 7}}`)
	require.NotContains(t, describe(t, s, onboarding.Body["execution_id"].(string)).Body, "waiting_for_activity_workers")
}
