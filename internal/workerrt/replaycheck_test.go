package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The replay check as the runtime runs it, with ingest's answers given
// by the test on NATS (ingest's own are tried in internal/ingest, the
// whole check on real code and histories in replaycheck_stack_test.go).

// checkDeployment declares a deployment of one shard and returns its
// connection and topology.
func checkDeployment(t *testing.T) (*nats.Conn, *broker.Topology) {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	top, err := broker.Declare(natstest.Context(t), js, broker.Config{Shards: 1, MemoryStorage: true})
	require.NoError(t, err)
	return nc, top
}

// answer answers subject's requests on nc with what reply returns for
// each one's body; nil leaves the request unanswered.
func answer(t *testing.T, nc *nats.Conn, subject string, reply func(data []byte) any) {
	t.Helper()
	sub, err := nc.Subscribe(subject, func(m *nats.Msg) {
		r := reply(m.Data)
		if r == nil {
			return
		}
		data, err := json.Marshal(r)
		if err == nil {
			_ = m.Respond(data)
		}
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = sub.Unsubscribe() })
}

// answerSample answers every sample request with ids.
func answerSample(t *testing.T, nc *nats.Conn, ids ...string) {
	t.Helper()
	answer(t, nc, broker.ReplaySampleSubject, func([]byte) any { return wire.ReplaySampleReply{ExecutionIDs: ids} })
}

// answerHistories answers a history request with replies[id], or that
// the execution is not found.
func answerHistories(t *testing.T, nc *nats.Conn, replies map[string]wire.ReplayHistoryReply) {
	t.Helper()
	answer(t, nc, broker.ReplayHistorySubject, func(data []byte) any {
		var req wire.ReplayHistoryRequest
		_ = json.Unmarshal(data, &req)
		if r, ok := replies[req.ExecutionID]; ok {
			return r
		}
		return wire.ReplayHistoryReply{Error: "execution not found"}
	})
}

// aHistory is a history of execution id of workflow: one WorkflowStarted.
func aHistory(id, workflow string) wire.ReplayHistoryReply {
	return wire.ReplayHistoryReply{History: &wire.ReplayHistory{ExecutionID: id, WorkflowName: workflow, WorkflowID: id, TaskQueue: wire.DefaultTaskQueue,
		Status: wire.StatusRunning, Events: []wire.Event{{Seq: 1, Type: wire.EventWorkflowStarted, At: time.Now(), Attrs: json.RawMessage(`{"input":1}`)}}}}
}

// checkedRuntime binds a runtime of nc with the replay check check,
// registering reg (whose Replay functions also run its workflow tasks),
// calls before, starts it, and returns it with its metrics; it is
// stopped at cleanup.
func checkedRuntime(t *testing.T, nc *nats.Conn, check harvesttype.ReplayCheck, reg Registration, before ...func(*Runtime)) (*Runtime, *prometheus.Registry) {
	t.Helper()
	ctx := natstest.Context(t)
	metrics := prometheus.NewRegistry()
	rt, err := New(harvesttype.WorkerConfig{NATS: nc, Metrics: metrics, Logger: slog.New(slog.DiscardHandler), ShutdownGrace: 5 * time.Second,
		ReplayCheck: check}, Handlers{
		Workflow: func(name string) (WorkflowFunc, bool) {
			run, ok := reg.Replay[name]
			return run, ok
		},
		HasActivity: func(string) bool { return false },
	})
	require.NoError(t, err)
	require.NoError(t, rt.Bind(ctx, reg))
	for _, f := range before {
		f(rt)
	}
	stop, err := rt.Start(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, stop(context.Background())) })
	return rt, metrics
}

// record is the worker's record in the workers bucket, once it has put
// it.
func record(t *testing.T, top *broker.Topology) registry.Worker {
	t.Helper()
	var ws []registry.Worker
	probe.Until(t, 10*time.Second, "the worker's record", func() bool {
		var err error
		ws, err = registry.Workers(natstest.Context(t), top.Workers, time.Now())
		require.NoError(t, err)
		return len(ws) == 1
	})
	return ws[0]
}

// replays returns a WorkflowFunc that answers err, counting its calls.
func replays(err error, calls *int) WorkflowFunc {
	return func(*wire.WorkflowTask) (WorkflowRun, error) {
		*calls++
		return WorkflowRun{}, err
	}
}

// TestTheReplayCheckRefusesAWorkflowWhoseHistoryDiverges: of two
// workflows, the one whose sampled history does not replay (a
// TaskFailureError, as the SDK's replay returns for a divergence) is
// refused: not registered, its refusal in the worker's record, its input
// schema not published, its tasks not run even from the unrouted subject;
// the other is taken. The metric counts each history by result.
func TestTheReplayCheckRefusesAWorkflowWhoseHistoryDiverges(t *testing.T) {
	t.Parallel()
	nc, top := checkDeployment(t)
	answerSample(t, nc, "e-1", "e-2")
	answerHistories(t, nc, map[string]wire.ReplayHistoryReply{"e-1": aHistory("e-1", "wf"), "e-2": aHistory("e-2", "wf")})
	diverged := &TaskFailureError{Err: errors.New("workflow is not deterministic: at history event 3 …"), Failure: wire.WorkflowTaskFailure{
		Reason: wire.TaskFailedNondeterminism, Message: "workflow is not deterministic: at history event 3 …", EventSeq: 3, History: "ActivityScheduled {…}", Code: "schedule_activity {…}"}}
	var good, bad int
	rt, metrics := checkedRuntime(t, nc, harvesttype.ReplayCheck{Sample: 5}, Registration{
		Workflows: []string{"wf_bad", "wf_good"}, Activities: []string{"act"},
		Schemas: map[string][]byte{"wf_bad": []byte(`{"type":"object"}`), "wf_good": []byte(`{"type":"object"}`)},
		Replay:  map[string]WorkflowFunc{"wf_bad": replays(diverged, &bad), "wf_good": replays(nil, &good)},
	}, func(rt *Runtime) {
		// The queue's consumer of unrouted workflow tasks, as an older
		// deployment left it.
		_, err := rt.js.CreateOrUpdateConsumer(natstest.Context(t), broker.TaskStream, jetstream.ConsumerConfig{
			Durable: ConsumerName(wire.DefaultTaskQueue, wire.TaskWorkflow), FilterSubject: broker.TaskSubject(wire.DefaultTaskQueue, wire.TaskWorkflow),
			AckPolicy: jetstream.AckExplicitPolicy,
		})
		require.NoError(t, err)
	})
	require.Equal(t, 2, good, "each history of the sample replayed")
	require.Equal(t, 1, bad, "the first divergence refuses the workflow")

	w := record(t, top)
	require.Equal(t, []string{"wf_good"}, w.Workflows)
	require.Equal(t, []string{"act"}, w.Activities)
	require.Equal(t, []registry.Refusal{{Workflow: "wf_bad", Reason: wire.TaskFailedNondeterminism, ExecutionID: "e-1",
		Message: "workflow is not deterministic: at history event 3 …", EventSeq: 3}}, w.ReplayRefused)
	ctx := natstest.Context(t)
	_, err := top.Schemas.Get(ctx, "wf_bad")
	require.ErrorIs(t, err, jetstream.ErrKeyNotFound, "a refused workflow's schema is not published")
	_, err = top.Schemas.Get(ctx, "wf_good")
	require.NoError(t, err)

	count := func(workflow, result string) float64 {
		return probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", workflow, "result", result)
	}
	require.Equal(t, []float64{2, 0, 0}, []float64{count("wf_good", "passed"), count("wf_good", "refused"), count("wf_good", "skipped")})
	require.Equal(t, []float64{0, 1, 0}, []float64{count("wf_bad", "passed"), count("wf_bad", "refused"), count("wf_bad", "skipped")})

	require.False(t, rt.workflows["wf_bad"], "no consumer of its own")
	for _, l := range rt.lanes() {
		require.NotContains(t, l.consumer.config.FilterSubject, "wf_bad")
	}
	// A task of it on the unrouted subject is handed back, not run.
	publishUnrouted(t, nc, wire.TaskWorkflow, wire.WorkflowTask{ExecutionID: "e-3", WorkflowName: "wf_bad", TaskID: 1,
		History: []wire.Event{{Seq: 1, Type: wire.EventWorkflowStarted, Attrs: json.RawMessage(`{}`)}}})
	probe.Until(t, 10*time.Second, "the unrouted task handed back", func() bool {
		return probe.Value(t, metrics, "harvest_worker_tasks_handed_back_total", "kind", wire.TaskWorkflow, "reason", handBackUnknown) >= 1
	})
	require.Equal(t, 1, bad, "a refused workflow's task is not run")
}

// TestTheReplayCheckSkipsWhatItCannotFetch: a history larger than a NATS
// message (ingest answers too_large), one not found, one answered empty
// are skipped and counted so; the workflow, with nothing against it, is
// taken.
func TestTheReplayCheckSkipsWhatItCannotFetch(t *testing.T) {
	t.Parallel()
	nc, top := checkDeployment(t)
	answerSample(t, nc, "ok", "big", "gone", "empty")
	answerHistories(t, nc, map[string]wire.ReplayHistoryReply{
		"ok":    aHistory("ok", "wf"),
		"big":   {TooLarge: true, Error: "the history of big is 2000000 bytes, more than the NATS server's max payload of 1048576"},
		"empty": {History: &wire.ReplayHistory{ExecutionID: "empty", WorkflowName: "wf"}},
	})
	var calls int
	_, metrics := checkedRuntime(t, nc, harvesttype.ReplayCheck{Sample: 5}, Registration{
		Workflows: []string{"wf"}, Replay: map[string]WorkflowFunc{"wf": replays(nil, &calls)},
	})
	require.Equal(t, 1, calls)
	require.Equal(t, []string{"wf"}, record(t, top).Workflows)
	require.Empty(t, record(t, top).ReplayRefused)
	require.InDelta(t, 1, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "wf", "result", "passed"), 0)
	require.InDelta(t, 3, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "wf", "result", "skipped"), 0)
}

// TestTheReplayCheckWithoutIngestTakesEveryWorkflow: no ingest answers
// (no responder): the check is skipped at once for each workflow, counted
// so, and the worker takes them all.
func TestTheReplayCheckWithoutIngestTakesEveryWorkflow(t *testing.T) {
	t.Parallel()
	nc, top := checkDeployment(t)
	var calls int
	began := time.Now()
	_, metrics := checkedRuntime(t, nc, harvesttype.ReplayCheck{Sample: 5}, Registration{
		Workflows: []string{"wf_a", "wf_b"}, Replay: map[string]WorkflowFunc{"wf_a": replays(nil, &calls), "wf_b": replays(nil, &calls)},
	})
	require.Less(t, time.Since(began), replayRequestTimeout, "no responder is known at once")
	require.Zero(t, calls)
	require.Equal(t, []string{"wf_a", "wf_b"}, record(t, top).Workflows)
	for _, wf := range []string{"wf_a", "wf_b"} {
		require.InDelta(t, 1, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", wf, "result", "skipped"), 0)
		require.InDelta(t, 0, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", wf, "result", "passed"), 0)
	}
}

// TestTheReplayCheckIsBoundedInTime: an ingest that hears the request
// and never answers, or a replay that does not end, holds the start no
// longer than the check's timeout; what was not checked is skipped and
// the workflow is taken.
func TestTheReplayCheckIsBoundedInTime(t *testing.T) {
	t.Parallel()
	const timeout = time.Second
	release := make(chan struct{})
	t.Cleanup(func() { close(release) })
	hangs := func(*wire.WorkflowTask) (WorkflowRun, error) {
		<-release
		return WorkflowRun{}, nil
	}
	for _, tc := range []struct {
		name    string
		answer  func(t *testing.T, nc *nats.Conn)
		skipped float64
	}{
		{"ingest does not answer", func(t *testing.T, nc *nats.Conn) {
			answer(t, nc, broker.ReplaySampleSubject, func([]byte) any { return nil })
		}, 1},
		{"the replay does not end", func(t *testing.T, nc *nats.Conn) {
			answerSample(t, nc, "e-1", "e-2")
			answerHistories(t, nc, map[string]wire.ReplayHistoryReply{"e-1": aHistory("e-1", "wf"), "e-2": aHistory("e-2", "wf")})
		}, 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			nc, top := checkDeployment(t)
			tc.answer(t, nc)
			began := time.Now()
			_, metrics := checkedRuntime(t, nc, harvesttype.ReplayCheck{Sample: 5, Timeout: timeout}, Registration{
				Workflows: []string{"wf"}, Replay: map[string]WorkflowFunc{"wf": hangs},
			})
			require.Less(t, time.Since(began), timeout+3*time.Second)
			require.Equal(t, []string{"wf"}, record(t, top).Workflows)
			require.InDelta(t, tc.skipped, probe.Value(t, metrics, "harvest_worker_replay_check_total", "workflow", "wf", "result", "skipped"), 0)
		})
	}
}
