package ingest_test

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// TestMetricsOfAStack runs work through a whole stack, ingest, scheduler
// and worker on one registry (harvest dev's /metrics), and reads what
// each counted: requests by route and status, starts, duplicates by
// layer, signals and webhooks by result, publishes; commands by kind,
// timers fired, callbacks delivered; workflow tasks, replays, attempts by
// name and outcome, retries, heartbeats and ledger hits. Names a process
// does not know (a workflow no worker has, a webhook source not
// configured) are counted as other, never under their own name.
func TestMetricsOfAStack(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	value := func(name string, labels ...string) float64 {
		t.Helper()
		return probe.Value(t, reg, name, labels...)
	}
	var flaky atomic.Int32
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	policy := callback.Policy{AllowHosts: []string{"127.0.0.0/8"}}
	s := stacktest.Start(t, devstack.Config{
		// nobody_has_it is declared, so that its start is accepted
		// although no worker has it; its task waits in the stream, and
		// no worker is handed it.
		Ingest: ingest.Config{Metrics: reg, CallbackPolicy: policy, DeclaredWorkflows: []string{"nobody_has_it"}, Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "partner", Kind: webhook.KindNone, AllowUnsigned: true},
			Rules:  []webhook.Rule{{Event: "go", Workflow: "collect", InputPointer: "/start"}},
		}}},
		Scheduler: scheduler.Config{CallbackPolicy: policy, CallbackPollInterval: 20 * time.Millisecond},
		Register: func(w *harvest.Worker) {
			// Fails its first attempt: retried once.
			harvest.RegisterActivity(w, "flaky", func(*harvest.ActivityContext, struct{}) (string, error) {
				if flaky.Add(1) == 1 {
					return "", errors.New("downstream hiccup")
				}
				return "ok", nil
			}, harvest.ActivityOptions{RetryPolicy: harvest.RetryExponential(3, 50*time.Millisecond)})
			// Runs its effect once, and reuses its result the second time.
			harvest.RegisterActivity(w, "once_twice", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
				key := ctx.IdempotencyKey().Subkey("effect")
				for range 2 {
					if _, err := harvest.Once(ctx, key, func(context.Context) (string, error) { return "sent", nil }); err != nil {
						return "", err
					}
				}
				return "ok", nil
			})
			// Heartbeats until one has been published.
			harvest.RegisterActivity(w, "beat", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
				for i := 0; ; i++ {
					if v, _ := probe.Read(t, reg, "harvest_worker_activity_heartbeats_total", "activity", "beat", "result", "sent"); v > 0 {
						return "ok", nil
					}
					ctx.Heartbeat(i)
					select {
					case <-ctx.Done():
						return "", ctx.Err()
					case <-time.After(20 * time.Millisecond): // poll interval, not synchronisation
					}
				}
			}, harvest.ActivityOptions{HeartbeatTimeout: 10 * time.Second})
			harvest.RegisterWorkflow(w, "flaky_wf", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				for _, act := range []string{"flaky", "once_twice", "beat"} {
					if err := harvest.ExecuteActivity(ctx, act, nil).Get(nil); err != nil {
						return "", err
					}
				}
				return "done", nil
			})
		},
	})

	// Starts: a workflow run to its end, one no worker has, a keyed
	// start retried (a broker duplicate) and replayed with a malformed
	// body (a claim duplicate), one with a completion callback.
	wf := stacktest.StartWorkflow(t, s, "flaky_wf", "", `{}`)
	require.Equal(t, 201, wf.Status, wf.Body)
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "nobody_has_it", "", `{}`).Status)
	coll := stacktest.StartWorkflow(t, s, "collect", "k-metrics", `{"input": {"count": 1}}`)
	require.Equal(t, 201, coll.Status, coll.Body)
	require.Equal(t, 200, stacktest.StartWorkflow(t, s, "collect", "k-metrics", `{"input": {"count": 1}}`).Status)
	require.Equal(t, 200, stacktest.StartWorkflow(t, s, "collect", "k-metrics", `{"input":`).Status)
	cb := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "completion_callback": "`+receiver.URL+`/done"}`)
	require.Equal(t, 201, cb.Status, cb.Body)
	// A keyed signal, and its retry on the signal route's deprecated
	// path, counted under its own route.
	collID := coll.Body["execution_id"].(string)
	require.Equal(t, true, stacktest.Signal(t, s, collID, "item", "sig-1", "", `{"sku": "a"}`).Body["signal_delivered"])
	retry := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/"+collID+"/signal/item", map[string]string{"Idempotency-Key": "sig-1"}, `{"sku": "a"}`)
	require.Equal(t, false, retry.Body["signal_delivered"], retry.Body)
	// A webhook delivery, delivered again, and one to a source that is
	// not configured.
	hook := []byte(`{"id": "evt-1", "type": "go", "start": {"count": 0}}`)
	require.Equal(t, 202, post(t, s.URL()+"/hooks/partner", nil, hook).Status)
	require.Equal(t, 200, post(t, s.URL()+"/hooks/partner", nil, hook).Status)
	require.Equal(t, 404, post(t, s.URL()+"/hooks/nope", nil, hook).Status)

	require.Equal(t, "done", stacktest.WaitCompleted(t, s, wf.Body["execution_id"].(string))["result"])
	stacktest.WaitCompleted(t, s, collID)
	stacktest.WaitCompleted(t, s, cb.Body["execution_id"].(string))
	probe.Until(t, 30*time.Second, "the callback to be counted", func() bool {
		delivered, _ := probe.Read(t, reg, "harvest_scheduler_callbacks_total", "result", "delivered")
		return delivered == 1
	})
	require.Zero(t, value("harvest_worker_workflow_tasks_total", "workflow", "other", "outcome", "handed_back"),
		"tasks are routed by name: the unknown workflow's never reaches the worker")
	require.Zero(t, value("harvest_worker_tasks_handed_back_total", "kind", "workflow", "reason", "unknown"))

	// Ingest.
	const startRoute = "POST /api/harvest/workflows/{name}/start"
	require.Equal(t, 4.0, value("harvest_ingest_http_requests_total", "route", startRoute, "code", "201"))
	require.Equal(t, 2.0, value("harvest_ingest_http_requests_total", "route", startRoute, "code", "200"))
	require.Equal(t, 6.0, value("harvest_ingest_http_request_duration_seconds", "route", startRoute))
	require.Equal(t, 1.0, value("harvest_ingest_http_requests_total", "route", "POST /api/harvest/executions/{execution_id}/signals/{name}", "code", "202"))
	require.Equal(t, 1.0, value("harvest_ingest_http_requests_total", "route", "POST /api/harvest/workflows/{execution_id}/signal/{signal_name}", "code", "202"))
	require.Equal(t, 1.0, value("harvest_ingest_http_requests_total", "route", "POST /hooks/{source}", "code", "404"))
	require.Zero(t, value("harvest_ingest_http_requests_in_flight"))
	require.Equal(t, 3.0, value("harvest_ingest_start_duplicates_total", "layer", "broker"), "the retries of the start, the signal and the webhook")
	require.Equal(t, 1.0, value("harvest_ingest_start_duplicates_total", "layer", "claim"))
	require.Equal(t, 4.0, value("harvest_ingest_starts_total", "result", "started_fresh"))
	require.Equal(t, 2.0, value("harvest_ingest_starts_total", "result", "deduplicated"))
	require.Equal(t, 1.0, value("harvest_ingest_signals_total", "result", "delivered"))
	require.Equal(t, 1.0, value("harvest_ingest_signals_total", "result", "deduplicated"))
	require.Equal(t, 1.0, value("harvest_ingest_webhooks_total", "source", "partner", "result", "accepted"))
	require.Equal(t, 1.0, value("harvest_ingest_webhooks_total", "source", "partner", "result", "duplicate"))
	require.Equal(t, 1.0, value("harvest_ingest_webhooks_total", "source", "other", "result", "rejected"))
	_, n := probe.Read(t, reg, "harvest_ingest_webhooks_total", "source", "nope")
	require.Zero(t, n, "a source that is not configured is no label value")
	require.GreaterOrEqual(t, value("harvest_ingest_publish_duration_seconds", "kind", "start"), 6.0, "four starts and two webhook deliveries")
	require.Zero(t, value("harvest_ingest_publish_failures_total"))

	// The scheduler.
	require.GreaterOrEqual(t, value("harvest_scheduler_commands_total", "kind", "start"), 5.0)
	require.Equal(t, 1.0, value("harvest_scheduler_commands_total", "kind", "signal"), "the signal's retry was a broker duplicate")
	require.Equal(t, 1.0, value("harvest_scheduler_timers_fired_total", "kind", "activity_retry"), "flaky's retry")
	require.Equal(t, 1.0, value("harvest_scheduler_callbacks_total", "result", "delivered"))
	require.Equal(t, 1.0, value("harvest_scheduler_lease_acquisitions_total"))
	require.Positive(t, value("harvest_scheduler_transaction_statements", "purpose", "apply"))

	// The worker.
	require.Equal(t, 1.0, value("harvest_worker_activity_attempts_total", "activity", "flaky", "outcome", "failed"))
	require.Equal(t, 1.0, value("harvest_worker_activity_attempts_total", "activity", "flaky", "outcome", "completed"))
	require.Equal(t, 2.0, value("harvest_worker_activity_attempt_duration_seconds", "activity", "flaky"))
	require.Equal(t, 1.0, value("harvest_worker_activity_retries_total", "activity", "flaky"))
	require.Zero(t, value("harvest_worker_activity_retries_total", "activity", "once_twice"))
	require.Equal(t, 1.0, value("harvest_worker_ledger_calls_total", "activity", "once_twice", "result", "run"))
	require.Equal(t, 1.0, value("harvest_worker_ledger_calls_total", "activity", "once_twice", "result", "hit"))
	require.Positive(t, value("harvest_worker_activity_heartbeats_total", "activity", "beat", "result", "sent"))
	require.Positive(t, value("harvest_worker_workflow_tasks_total", "workflow", "flaky_wf", "outcome", "completed"))
	require.Positive(t, value("harvest_worker_workflow_replays_total", "workflow", "flaky_wf"))
	require.Greater(t, value("harvest_worker_workflow_replay_events_total", "workflow", "flaky_wf"),
		value("harvest_worker_workflow_replays_total", "workflow", "flaky_wf"), "later tasks replay longer histories")
	_, n = probe.Read(t, reg, "harvest_worker_workflow_tasks_total", "workflow", "nobody_has_it")
	require.Zero(t, n, "a workflow no worker has is no label value")
}
