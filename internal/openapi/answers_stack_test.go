package openapi_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/openapi"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// TestAnswersAreTheOnesTheOpenAPIDocumentDescribes calls every route of a
// real stack, successes and the usual refusals, and checks each answer
// against the OpenAPI document GET /openapi.json serves: its status is
// described for the route, and its body matches the schema.
func TestAnswersAreTheOnesTheOpenAPIDocumentDescribes(t *testing.T) {
	t.Parallel()
	// A webhook source, so that GET /api/harvest/webhooks lists one.
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Webhooks: []webhook.Endpoint{{
		Source: webhook.Source{Name: "oa", Kind: webhook.KindNone, AllowUnsigned: true},
		Rules:  []webhook.Rule{{Event: "go", Workflow: examples.WorkflowCollect, Signal: "item", WorkflowID: "oa-{/id}"}},
	}}}})
	ctx := t.Context()

	// The served document is the committed one.
	resp, err := http.Get(s.URL() + "/openapi.json")
	require.NoError(t, err)
	served, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, openapi.JSON, served)
	v, err := openapi.NewValidator(served)
	require.NoError(t, err)

	seen := map[string]bool{}
	// call sends a request to path (the pattern route, filled in) and
	// checks the answer; it returns the status and the body.
	call := func(method, route, path, body string, header ...string) (int, []byte) {
		t.Helper()
		var rd io.Reader
		if body != "" {
			rd = strings.NewReader(body)
		}
		req, err := http.NewRequestWithContext(ctx, method, s.URL()+path, rd)
		require.NoError(t, err)
		if body != "" {
			req.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(header); i += 2 {
			req.Header.Set(header[i], header[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		data, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		require.NoError(t, v.Check(method, route, resp.StatusCode, resp.Header.Get("Content-Type"), data))
		seen[method+" "+route] = true
		return resp.StatusCode, data
	}
	field := func(data []byte, name string) string {
		t.Helper()
		var m map[string]any
		require.NoError(t, json.Unmarshal(data, &m))
		v, _ := m[name].(string)
		return v
	}

	call("GET", "/healthz", "/healthz", "")
	call("GET", "/readyz", "/readyz", "")
	call("GET", "/openapi.json", "/openapi.json", "")
	call("GET", "/metrics", "/metrics", "")

	start := "/api/harvest/workflows/{name}/start"
	status, data := call("POST", start, "/api/harvest/workflows/onboarding/start", `{"input": {"user_id": 1}}`, "Idempotency-Key", "oa-1")
	require.Equal(t, http.StatusCreated, status)
	done := field(data, "execution_id")
	status, _ = call("POST", start, "/api/harvest/workflows/onboarding/start", `{"input": {"user_id": 1}}`, "Idempotency-Key", "oa-1")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", start, "/api/harvest/workflows/onboarding/start", `{"input": `)
	require.Equal(t, http.StatusBadRequest, status)
	status, data = call("POST", start, "/api/harvest/workflows/collect/start", `{"input": {"count": 2}, "run_timeout": "2h", "execution_timeout": "1h"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(data), `"invalid_timeout"`)
	status, _ = call("POST", start, "/api/harvest/workflows/collect/start", `{"input": {"count": "many"}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, data = call("POST", start, "/api/harvest/workflows/collect/start", `{"input": {"count": 2}, "workflow_id": "oa-order", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, http.StatusCreated, status)
	waiting := field(data, "execution_id")
	status, _ = call("POST", start, "/api/harvest/workflows/collect/start", `{"input": {"count": 2}, "workflow_id": "oa-order", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, http.StatusConflict, status)

	status, data = call("POST", start, "/api/harvest/workflows/tally/start", `{"input": {"every": 100}}`)
	require.Equal(t, http.StatusCreated, status)
	tally := field(data, "execution_id")
	update := "/api/harvest/executions/{execution_id}/updates/{name}"
	status, data = call("POST", update, "/api/harvest/executions/"+tally+"/updates/add", `5`, "Idempotency-Key", "oa-upd-1")
	require.Equal(t, http.StatusOK, status, "%s", data)
	updateID := field(data, "update_id")
	status, _ = call("POST", update, "/api/harvest/executions/"+tally+"/updates/add", `-5`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = call("POST", update, "/api/harvest/executions/"+tally+"/updates/subtract", `5`)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("POST", update, "/api/harvest/executions/"+tally+"/updates/add?wait=soon", `5`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("POST", update, "/api/harvest/executions/"+tally+"/updates/add", `"`+strings.Repeat("x", 70<<10)+`"`)
	require.Equal(t, http.StatusRequestEntityTooLarge, status)
	getUpdate := "/api/harvest/executions/{execution_id}/updates/{update_id}"
	status, _ = call("GET", getUpdate, "/api/harvest/executions/"+tally+"/updates/"+updateID+"?wait=1s", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", getUpdate, "/api/harvest/executions/"+tally+"/updates/00000000-0000-0000-0000-000000000000", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", getUpdate, "/api/harvest/executions/"+tally+"/updates/nope", "")
	require.Equal(t, http.StatusBadRequest, status)

	signal := "/api/harvest/executions/{execution_id}/signals/{name}"
	status, _ = call("POST", signal, "/api/harvest/executions/"+waiting+"/signals/item", `{"sku": "A"}`, "Idempotency-Key", "oa-sig-1")
	require.Equal(t, http.StatusAccepted, status)
	status, _ = call("POST", signal, "/api/harvest/executions/"+waiting+"/signals/item?idempotency_key=oa-sig-1", `{"sku": "A"}`)
	require.Equal(t, http.StatusAccepted, status)
	status, _ = call("POST", signal, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/signals/item", `{}`)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("POST", signal, "/api/harvest/executions/oa-order/signals/item", `{}`)
	require.Equal(t, http.StatusNotFound, status, "a workflow_id")
	status, _ = call("POST", signal, "/api/harvest/executions/"+waiting+"/signals/bad.name", `{}`)
	require.Equal(t, http.StatusBadRequest, status)
	// The deprecated path serves the same.
	deprecated := "/api/harvest/workflows/{execution_id}/signal/{signal_name}"
	status, _ = call("POST", deprecated, "/api/harvest/workflows/"+waiting+"/signal/item", `{"sku": "A"}`, "Idempotency-Key", "oa-sig-1")
	require.Equal(t, http.StatusAccepted, status)
	status, _ = call("POST", deprecated, "/api/harvest/workflows/00000000-0000-0000-0000-000000000000/signal/item", `{}`)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("POST", deprecated, "/api/harvest/workflows/oa-order/signal/item", `{}`)
	require.Equal(t, http.StatusNotFound, status, "a workflow_id")

	sws := "/api/harvest/workflows/{name}/signal-with-start"
	status, _ = call("POST", sws, "/api/harvest/workflows/collect/signal-with-start", `{"workflow_id": "oa-sws", "input": {"count": 3}, "signal_name": "item", "signal_payload": 1}`)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call("POST", sws, "/api/harvest/workflows/collect/signal-with-start", `{"workflow_id": "oa-sws", "input": {"count": 3}, "signal_name": "item", "signal_payload": 2}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", sws, "/api/harvest/workflows/collect/signal-with-start", `{"input": {"count": 3}}`)
	require.Equal(t, http.StatusBadRequest, status)

	list := "/api/harvest/executions"
	status, _ = call("GET", list, list+"?workflow=collect&limit=1", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", list, list+"?status=Sleeping", "")
	require.Equal(t, http.StatusBadRequest, status)
	describe := "/api/harvest/executions/{execution_id}"
	status, _ = call("GET", describe, "/api/harvest/executions/"+done, "")
	require.Equal(t, http.StatusOK, status)
	status, data = call("GET", describe, "/api/harvest/executions/"+waiting, "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"signal_keys"`)
	status, _ = call("GET", describe, "/api/harvest/executions/00000000-0000-0000-0000-000000000000", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", describe+"/history", "/api/harvest/executions/"+done+"/history", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", "/api/harvest/workflows", "/api/harvest/workflows", "")
	require.Equal(t, http.StatusOK, status)
	versions := "/api/harvest/workflows/{name}/versions"
	status, _ = call("GET", versions, "/api/harvest/workflows/charge/versions", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", versions, "/api/harvest/workflows/no.such/versions", "")
	require.Equal(t, http.StatusBadRequest, status)

	// A concurrency start policy of one: the second start is Pending.
	oaConcurrency := `{"input": {"every": 100, "until": 1, "customer": "oa"}, "start_policy": {"concurrency": {"limit": 1, "key": "/customer"}}}`
	status, _ = call("POST", start, "/api/harvest/workflows/tally/start", oaConcurrency)
	require.Equal(t, http.StatusCreated, status)
	status, data = call("POST", start, "/api/harvest/workflows/tally/start", oaConcurrency)
	require.Equal(t, http.StatusCreated, status)
	require.Equal(t, "Pending", field(data, "status"))
	status, data = call("GET", describe, "/api/harvest/executions/"+field(data, "execution_id"), "")
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "concurrency", field(data, "waiting_for"))
	require.Equal(t, "oa", field(data, "concurrency_key"))
	status, data = call("GET", list, list+"?status=Pending", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"status":"Pending"`)
	status, data = call("POST", start, "/api/harvest/workflows/tally/start", `{"input": {"every": 100}, "start_policy": {"concurrency": {"limit": 1, "key": "/customer"}}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	require.Equal(t, "concurrency_key_missing", field(data, "error"))
	concurrency := "/api/harvest/workflows/{name}/concurrency"
	status, data = call("GET", concurrency, "/api/harvest/workflows/tally/concurrency?key=oa", "")
	require.Equal(t, http.StatusOK, status)
	require.JSONEq(t, `{"workflow": "tally", "key": "oa", "running": 1, "pending": 1, "limit": 1}`, string(data))
	status, _ = call("GET", concurrency, "/api/harvest/workflows/tally/concurrency", "")
	require.Equal(t, http.StatusOK, status, "the policy without a key, which no start used")
	status, _ = call("GET", concurrency, "/api/harvest/workflows/no.such/concurrency", "")
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("GET", "/api/harvest/webhooks", "/api/harvest/webhooks", "")
	require.Equal(t, http.StatusOK, status)
	status, data = call("GET", "/api/harvest/workers", "/api/harvest/workers", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"started_at"`, "the stack's worker says who it is")
	taskQueue := "/api/harvest/task-queues/{name}"
	status, _ = call("GET", taskQueue, "/api/harvest/task-queues/default", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", taskQueue, "/api/harvest/task-queues/no.such", "")
	require.Equal(t, http.StatusBadRequest, status)

	// Query states: tally sets "progress" when it starts.
	status, data = call("POST", start, "/api/harvest/workflows/tally/start", `{"input": {"every": 2}}`)
	require.Equal(t, http.StatusCreated, status)
	tally = field(data, "execution_id")
	state := "/api/harvest/executions/{execution_id}/state/{name}"
	probe.Until(t, 30*time.Second, "tally to set its state", func() bool {
		status, _ = call("GET", state, "/api/harvest/executions/"+tally+"/state/progress", "")
		return status == http.StatusOK
	})
	status, _ = call("GET", state, "/api/harvest/executions/"+tally+"/state/progress?after_seq=1&wait=10ms", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", state, "/api/harvest/executions/"+tally+"/state/nope", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", state, "/api/harvest/executions/"+tally+"/state/progress?wait=forever", "")
	require.Equal(t, http.StatusBadRequest, status)
	children := "/api/harvest/executions/{execution_id}/children"
	status, data = call("GET", children, "/api/harvest/executions/"+tally+"/children", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"children":[]`)
	status, _ = call("GET", children, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/children", "")
	require.Equal(t, http.StatusNotFound, status)
	states := "/api/harvest/executions/{execution_id}/state"
	status, data = call("GET", states, "/api/harvest/executions/"+tally+"/state", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"progress"`)
	status, _ = call("GET", states, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/state", "")
	require.Equal(t, http.StatusNotFound, status)

	cancel := "/api/harvest/executions/{execution_id}/cancel"
	status, _ = call("POST", cancel, "/api/harvest/executions/"+waiting+"/cancel", `{"reason": "openapi test"}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", cancel, "/api/harvest/executions/not-an-id/cancel", "")
	require.Equal(t, http.StatusBadRequest, status, "invalid_execution_id")
	status, _ = call("POST", cancel, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/cancel", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", describe, "/api/harvest/executions/urn:uuid:00000000-0000-0000-0000-000000000000", "")
	require.Equal(t, http.StatusBadRequest, status, "invalid_execution_id")
	status, _ = call("POST", cancel, "/api/harvest/executions/"+waiting+"/cancel", `{"reason": "x", "why": "y"}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, data = call("POST", cancel, "/api/harvest/executions/"+waiting+"/cancel", `{"cancel_grace": "-5s"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(data), `"invalid_cancel_grace"`)
	terminate := "/api/harvest/executions/{execution_id}/terminate"
	status, data = call("POST", start, "/api/harvest/workflows/collect/start", `{"input": {"count": 2}}`)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call("POST", terminate, "/api/harvest/executions/"+field(data, "execution_id")+"/terminate", `{"reason": "openapi test"}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", terminate, "/api/harvest/executions/"+done+"/terminate", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", update, "/api/harvest/executions/"+done+"/updates/add", `5`)
	require.Equal(t, http.StatusConflict, status, "closed")
	status, _ = call("POST", terminate, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/terminate", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", list, list+"?workflow_name=collect", "")
	require.Equal(t, http.StatusBadRequest, status)

	command := "/api/harvest/commands/{command_id}"
	status, _ = call("GET", command, "/api/harvest/commands/"+dedup.StartCommandID(examples.WorkflowOnboarding, "oa-1"), "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", command, "/api/harvest/commands/nosuch", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", "/api/harvest/commands/dead", "/api/harvest/commands/dead", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", "/api/harvest/commands/dead", "/api/harvest/commands/dead?shard=x", "")
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("GET", "/api/harvest/commands/dead/{id}", "/api/harvest/commands/dead/12345", "")
	require.Equal(t, http.StatusNotFound, status)

	retention := "/api/harvest/retention"
	status, _ = call("GET", retention, retention, "")
	require.Equal(t, http.StatusOK, status)
	// Far ahead, every closed execution is past retention.
	status, data = call("GET", retention, retention+"?as_of=2999-01-01T00:00:00Z", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"oldest_prune_after"`)
	status, _ = call("GET", retention, retention+"?as_of=soon", "")
	require.Equal(t, http.StatusBadRequest, status)
	prune := "/api/harvest/retention/prune"
	status, _ = call("POST", prune, prune, "")
	require.Equal(t, http.StatusAccepted, status)
	status, _ = call("POST", prune, prune+"?dry_run=1", "")
	require.Equal(t, http.StatusBadRequest, status)

	schedules := "/api/harvest/schedules"
	schedule := schedules + "/{schedule_id}"
	oaSchedule := `{"workflow": "charge", ` + stacktest.ChargeInput + `, "spec": {"every": "1h"}}`
	status, _ = call("PUT", schedule, schedules+"/oa-sched", oaSchedule)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call("PUT", schedule, schedules+"/oa-sched", oaSchedule)
	require.Equal(t, http.StatusOK, status)
	status, data = call("PUT", schedule, schedules+"/oa-bad", `{"workflow": "charge", "spec": {"cron": ["0 25 * * *"]}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(data), `"invalid_schedule_spec"`)
	status, _ = call("PUT", schedule, schedules+"/oa-bad", `{"workflow": "no_such_workflow", "spec": {"every": "1m"}}`)
	require.Equal(t, http.StatusNotFound, status)
	trigger := schedule + "/trigger"
	status, _ = call("POST", trigger, schedules+"/oa-sched/trigger", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", trigger, schedules+"/nope/trigger", "")
	require.Equal(t, http.StatusNotFound, status)
	status, data = call("GET", schedule, schedules+"/oa-sched", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"last_fire"`, "the trigger's fire")
	status, _ = call("GET", schedule, schedules+"/nope", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("GET", schedule, schedules+"/no%20spaces", "")
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("GET", schedules, schedules+"?limit=1", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", schedules, schedules+"?limit=0", "")
	require.Equal(t, http.StatusBadRequest, status)
	fires := schedule + "/fires"
	status, data = call("GET", fires, schedules+"/oa-sched/fires?limit=10", "")
	require.Equal(t, http.StatusOK, status)
	require.Contains(t, string(data), `"trigger":"trigger"`)
	status, _ = call("GET", fires, schedules+"/oa-sched/fires?cursor=nope", "")
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("GET", fires, schedules+"/nope/fires", "")
	require.Equal(t, http.StatusNotFound, status)
	pause := schedule + "/pause"
	status, _ = call("POST", pause, schedules+"/oa-sched/pause", `{"note": "openapi test"}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", pause, schedules+"/oa-sched/pause", `{"why": "openapi test"}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("POST", pause, schedules+"/nope/pause", "")
	require.Equal(t, http.StatusNotFound, status)
	unpause := schedule + "/unpause"
	status, _ = call("POST", unpause, schedules+"/oa-sched/unpause", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", unpause, schedules+"/nope/unpause", "")
	require.Equal(t, http.StatusNotFound, status)
	backfill := schedule + "/backfill"
	status, _ = call("POST", backfill, schedules+"/oa-sched/backfill", `{"start": "2024-03-01T00:00:00Z", "end": "2024-03-01T02:00:00Z"}`)
	require.Equal(t, http.StatusOK, status)
	status, data = call("POST", backfill, schedules+"/oa-sched/backfill", `{"start": "2024-03-02T00:00:00Z", "end": "2024-03-01T00:00:00Z"}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Contains(t, string(data), `"invalid_backfill"`)
	status, _ = call("POST", backfill, schedules+"/nope/backfill", `{"start": "2024-03-01T00:00:00Z", "end": "2024-03-01T02:00:00Z"}`)
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("DELETE", schedule, schedules+"/oa-sched", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("DELETE", schedule, schedules+"/oa-sched", "")
	require.Equal(t, http.StatusNotFound, status)

	closeGate := "/api/harvest/admission/{workflow}/close"
	status, _ = call("POST", closeGate, "/api/harvest/admission/charge/close", `{}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("POST", closeGate, "/api/harvest/admission/charge/close", `{"reason": "openapi test"}`)
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", "/api/harvest/admission", "/api/harvest/admission", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", start, "/api/harvest/workflows/charge/start", `{"input": {"amount_cents": 1, "customer_id": "c"}}`)
	require.Equal(t, http.StatusServiceUnavailable, status)
	status, _ = call("POST", "/api/harvest/admission/{workflow}/open", "/api/harvest/admission/charge/open", "")
	require.Equal(t, http.StatusOK, status)

	runs := "/v1/runs"
	status, data = call("POST", runs, runs, `{"workflow": "collect", "input": {"count": 1}}`, "Idempotency-Key", "oa-run-1")
	require.Equal(t, http.StatusCreated, status)
	run := field(data, "run_id")
	status, _ = call("POST", runs, runs, `{"workflow": "collect", "input": {"count": 1}}`, "Idempotency-Key", "oa-run-1")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", "/v1/runs/{run_id}", "/v1/runs/"+run, "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", "/v1/runs/{run_id}", "/v1/runs/00000000-0000-0000-0000-000000000000", "")
	require.Equal(t, http.StatusNotFound, status)
	external := "/v1/runs/{run_id}/external/{binding_id}"
	status, _ = call("POST", external, "/v1/runs/"+run+"/external/item", `{"sku": "B"}`, "X-Idempotency-Key", "oa-ext-1")
	require.Equal(t, http.StatusAccepted, status)
	status, data = call("POST", external, "/v1/runs/"+run+"/external/item", `{"sku": "B"}`, "X-Idempotency-Key", "oa-ext-1")
	require.Equal(t, http.StatusAccepted, status)
	require.Equal(t, "already_processed", field(data, "status"))

	status, _ = call("POST", "/hooks/{source}", "/hooks/nosuch", `{}`)
	require.Equal(t, http.StatusNotFound, status)

	// A reset of the completed execution: its plan, the reset, the same
	// reset again, and the refusals.
	reset := "/api/harvest/executions/{execution_id}/reset"
	resetPath := "/api/harvest/executions/" + done + "/reset"
	status, data = call("POST", reset, resetPath+"?dry_run=true", `{"to": "last_task"}`)
	require.Equal(t, http.StatusOK, status, "%s", data)
	status, _ = call("POST", reset, resetPath, `{"to": {"seq": 1}}`)
	require.Equal(t, http.StatusUnprocessableEntity, status)
	status, _ = call("POST", reset, resetPath, `{"to": "somewhere"}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("POST", reset, "/api/harvest/executions/00000000-0000-0000-0000-000000000000/reset", `{"to": "last_task"}`)
	require.Equal(t, http.StatusNotFound, status)
	status, data = call("POST", reset, resetPath, `{"to": "last_task", "reason": "openapi test"}`)
	require.Equal(t, http.StatusCreated, status, "%s", data)
	status, _ = call("POST", reset, resetPath, `{"to": "last_task"}`)
	require.Equal(t, http.StatusCreated, status)
	status, _ = call("POST", reset, resetPath, `{"to": "first_task"}`)
	require.Equal(t, http.StatusConflict, status)

	countRoute := "/api/harvest/executions/count"
	status, _ = call("GET", countRoute, countRoute+"?workflow=collect", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", countRoute, countRoute+"?attr.nope=1", "")
	require.Equal(t, http.StatusBadRequest, status)

	// A batch: created (and again, keyed), read, listed, cancelled; refused.
	batches := "/api/harvest/batches"
	batchBody := `{"operation": "terminate", "filter": {"workflow": "collect", "status": "Running"}, "rate": 1, "reason": "openapi test"}`
	status, data = call("POST", batches, batches, batchBody, "Idempotency-Key", "oa-batch")
	require.Equal(t, http.StatusCreated, status, "%s", data)
	batchID := field(data, "batch_id")
	status, _ = call("POST", batches, batches, batchBody, "Idempotency-Key", "oa-batch")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", batches, batches, `{"operation": "terminate", "filter": {}}`)
	require.Equal(t, http.StatusBadRequest, status)
	status, _ = call("GET", batches, batches, "")
	require.Equal(t, http.StatusOK, status)
	batch := batches + "/{batch_id}"
	status, _ = call("GET", batch, batches+"/"+batchID, "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("GET", batch, batches+"/00000000-0000-0000-0000-000000000000", "")
	require.Equal(t, http.StatusNotFound, status)
	status, _ = call("POST", batch+"/cancel", batches+"/"+batchID+"/cancel", "")
	require.Equal(t, http.StatusOK, status)
	status, _ = call("POST", batch+"/cancel", batches+"/00000000-0000-0000-0000-000000000000/cancel", "")
	require.Equal(t, http.StatusNotFound, status)

	// Every operation of the document was called.
	for _, op := range v.Operations() {
		require.True(t, seen[op], "no call of %s: add one", op)
	}
}
