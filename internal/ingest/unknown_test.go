package ingest

import (
	"net/http"
	"strings"
	"testing"
	"unicode/utf8"

	"github.com/stretchr/testify/require"
)

// TestUnknownBodyMembersAreRefused: a member a body Harvest defines does
// not have is refused with 400 unknown_field naming it, before anything
// is published; user payloads (a start's input, a signal's payload, a
// webhook's body) are never looked into.
func TestUnknownBodyMembersAreRefused(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	const (
		start  = "/api/harvest/workflows/w/start"
		sws    = "/api/harvest/workflows/w/signal-with-start"
		cancel = "/api/harvest/executions/" + testExecutionID + "/cancel"
		runs   = "/v1/runs"
		gate   = "/api/harvest/admission/w/close"
	)
	long := strings.Repeat("é", 200)
	for _, tc := range []struct {
		name, target, body string
		field, hint        string
	}{
		{name: "start, a misspelt reuse_policy", target: start, body: `{"input": 1, "id_reuse_policy": "reject_duplicate"}`,
			field: "id_reuse_policy", hint: `(did you mean "reuse_policy"?)`},
		{name: "start, a typo", target: start, body: `{"workflow_di": "order-1"}`, field: "workflow_di", hint: `(did you mean "workflow_id"?)`},
		{name: "start, the first of two", target: start, body: `{"inputs": {}, "delay_ms": 5}`, field: "inputs", hint: `(did you mean "input"?)`},
		{name: "start, unstorable too", target: start, body: `{"input": 1, "note": "\ud800"}`, field: "note",
			hint: "a start's body has input, workflow_id, idempotency_key, reuse_policy, delay, start_at, completion_callback, start_policy, store, task_queue, versioning, build_id, run_timeout, execution_timeout, priority and search_attributes"},
		{name: "start, a long name", target: start, body: `{"` + long + `": 1}`, field: shownName(long)},
		{name: "signal-with-start", target: sws, body: `{"workflow_id": "o", "signal_name": "item", "payload": {"sku": "a"}}`,
			field: "payload", hint: `(did you mean "signal_payload"?)`},
		{name: "cancel", target: cancel, body: `{"reason": "no", "force": true}`, field: "force"},
		{name: "run", target: runs, body: `{"workflow": "w", "workflow_name": "w"}`, field: "workflow_name", hint: `(did you mean "workflow"?)`},
		{name: "admission gate", target: gate, body: `{"reason": "deploy", "until": "noon"}`, field: "until"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, a := e.do("POST", tc.target, nil, tc.body)
			require.Equal(t, http.StatusBadRequest, status, "%+v", a)
			require.Equal(t, "unknown_field", a.Error, a.Message)
			require.Equal(t, tc.field, a.Field, a.Message)
			require.True(t, utf8.ValidString(a.Message))
			require.Contains(t, a.Message, "unknown field")
			if tc.hint != "" {
				require.Contains(t, a.Message, tc.hint)
			}
		})
	}
	require.LessOrEqual(t, len(shownName(long)), maxShownName+len("…"))
	require.Zero(t, e.published(), "a refused request publishes nothing")

	// Not one JSON value is invalid_json, whatever members it has.
	status, a := e.do("POST", start, nil, `{"nope": 1}}`)
	require.Equal(t, http.StatusBadRequest, status)
	require.Equal(t, "invalid_json", a.Error, a.Message)

	// Member names match as encoding/json matches them; payloads hold
	// what they like.
	for _, tc := range []struct{ target, body string }{
		{start, `{"Input": {"id_reuse_policy": 1, "anything": [{"x": 1}]}, "REUSE_POLICY": "allow_duplicate"}`},
		{"/api/harvest/executions/" + testExecutionID + "/signals/item", `{"whatever": 1, "id_reuse_policy": 2}`},
		{sws, `{"workflow_id": "o", "signal_name": "item", "signal_payload": {"payload": 1}, "input": {"x": 1}}`},
		{runs, `{"workflow": "w", "input": {"workflow_name": "w"}}`},
		{"/v1/runs/" + testExecutionID + "/external/approval", `{"approved": true, "by": "ops"}`},
		{"/hooks/shop", `{"id": "evt-1", "type": "order.created", "livemode": false, "extra": {"a": 1}}`},
	} {
		status, a := e.do("POST", tc.target, nil, tc.body)
		require.Equal(t, http.StatusAccepted, status, "%s %s: %+v", tc.target, tc.body, a)
	}
	require.EqualValues(t, 6, e.published())
}

// TestUnknownQueryParametersAreRefused: a query parameter a route does
// not read is refused with 400 unknown_parameter naming it, before
// anything is read or published; routes that read none refuse any; the
// parameters a route reads pass.
func TestUnknownQueryParametersAreRefused(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	exec := "/api/harvest/executions/" + testExecutionID
	for _, tc := range []struct {
		method, target, field, hint string
	}{
		{"GET", "/api/harvest/executions?workflow_name=charge", "workflow_name", `(did you mean "workflow"?): GET /api/harvest/executions reads workflow, status, key_prefix, workflow_id_prefix, created_after, created_before, limit, cursor and attr.*`},
		{"GET", "/api/harvest/executions?workflow=charge&Status=Running", "Status", `(did you mean "status"?)`},
		{"GET", "/api/harvest/executions?limit=5&page=2", "page", ""},
		{"GET", "/api/harvest/commands/dead?shards=1", "shards", `(did you mean "shard"?): GET /api/harvest/commands/dead reads shard, before and limit`},
		{"GET", exec + "?verbose", "verbose", "reads no query parameters"},
		{"GET", exec + "/history?limit=5", "limit", "reads no query parameters"},
		{"GET", "/api/harvest/commands/" + testExecutionID + "?x=1", "x", ""},
		{"GET", "/api/harvest/commands/dead/1?x=1", "x", ""},
		{"GET", "/api/harvest/admission?workflow=w", "workflow", ""},
		{"GET", "/api/harvest/workflows?name=w", "name", ""},
		{"GET", "/v1/runs/" + testExecutionID + "?verbose", "verbose", "GET /v1/runs/{run_id} reads no query parameters"},
		{"POST", exec + "/terminate?reason=no", "reason", ""},
		{"POST", "/api/harvest/admission/w/close?reason=deploy", "reason", ""},
		{"POST", "/api/harvest/admission/w/open?now", "now", ""},
		{"POST", "/api/harvest/workflows/w/start?idempotency_key=k", "idempotency_key", "POST /api/harvest/workflows/{name}/start reads no query parameters"},
		{"POST", "/api/harvest/workflows/w/start?reuse%5Fpolicy=x", "reuse_policy", ""},
		{"POST", "/api/harvest/executions/" + testExecutionID + "/signals/item?key=k", "key", `(did you mean "idempotency_key"?)`},
		{"POST", "/api/harvest/workflows/" + testExecutionID + "/signal/item?key=k", "key", `(did you mean "idempotency_key"?)`},
		{"POST", "/api/harvest/workflows/w/signal-with-start?idempotency_key=k", "idempotency_key", ""},
		{"POST", exec + "/cancel?reason=no", "reason", ""},
		{"POST", "/v1/runs?workflow=w", "workflow", ""},
		{"POST", "/v1/runs/" + testExecutionID + "/external/approval?idempotency_key=k", "idempotency_key", ""},
		{"GET", "/api/harvest/executions?%zz=1", "%zz", ""},
	} {
		t.Run(tc.target, func(t *testing.T) {
			status, a := e.do(tc.method, tc.target, nil, `{"workflow": "w", "reason": "r"}`)
			require.Equal(t, http.StatusBadRequest, status, "%+v", a)
			require.Equal(t, "unknown_parameter", a.Error, a.Message)
			require.Equal(t, tc.field, a.Field, a.Message)
			require.Contains(t, a.Message, "unknown query parameter")
			require.Contains(t, a.Message, tc.hint)
		})
	}
	require.Zero(t, e.published(), "a refused request publishes nothing")

	// The parameters a route reads pass (this ingest has no database:
	// 503), and so do empty pairs; health, metrics and webhooks ignore
	// parameters.
	for _, target := range []string{
		"/api/harvest/executions?workflow=charge&status=Running&limit=5", "/api/harvest/executions?&limit=5&",
		"/api/harvest/executions?key_prefix=evt&workflow_id_prefix=o&created_after=2026-01-01T00:00:00Z&created_before=2027-01-01T00:00:00Z",
		"/api/harvest/commands/dead?shard=1&before=9&limit=5",
	} {
		status, a := e.do("GET", target, nil, "")
		require.Equal(t, http.StatusServiceUnavailable, status, "%s: %+v", target, a)
	}
	for _, target := range []string{"/healthz?probe=1", "/metrics?name[]=x", "/openapi.json?v=1"} {
		status, a := e.do("GET", target, nil, "")
		require.Equal(t, http.StatusOK, status, "%s: %+v", target, a)
	}
	status, a := e.do("POST", "/api/harvest/executions/"+testExecutionID+"/signals/item?idempotency_key=k", nil, `{"sku": "a"}`)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	status, a = e.do("POST", "/api/harvest/workflows/"+testExecutionID+"/signal/item?idempotency_key=k-old", nil, `{"sku": "a"}`)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	status, a = e.do("POST", "/hooks/shop?from=stripe", nil, `{"id": "evt-q", "type": "order.created"}`)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	require.EqualValues(t, 3, e.published())
}
