package ingest

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/poison"
	"github.com/harvest-engine/harvest/internal/webhook"
)

const (
	testHookSecret    = "hook-secret"
	testArcFlowSecret = "arcflow-secret"
	testExecutionID   = "01a23850-3557-76a9-bea9-c3af4081c19d"
)

// edge is an ingest on an embedded NATS without a scheduler or a
// database: every command it publishes stays on the command stream.
type edge struct {
	t   *testing.T
	s   *Server
	top *broker.Topology
}

func newEdge(t *testing.T) *edge {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 2, MemoryStorage: true})
	require.NoError(t, err)
	s, err := New(Config{Topology: top, NC: nc, OutcomeWait: 50 * time.Millisecond, ArcFlowSecrets: []string{testArcFlowSecret},
		// No worker runs: the workflows started are declared.
		DeclaredWorkflows: []string{"w"},
		Webhooks: []webhook.Endpoint{{
			Source: webhook.Source{Name: "shop", Kind: webhook.KindHMAC, Secrets: []string{testHookSecret}, Header: "X-Signature", Prefix: "sha256="},
			Rules: []webhook.Rule{
				{Event: "order.created", Workflow: "fulfil"},
				{Event: "order.item", Workflow: "collect", Signal: "item", WorkflowID: "order-{/order_id}"},
			},
		}}})
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { require.NoError(t, s.Stop(context.Background())) })
	return &edge{t: t, s: s, top: top}
}

// do sends a request; signing, when set, names the header that carries
// the body's HMAC under secret.
func (e *edge) do(method, target string, header map[string]string, body string) (int, api.ErrorResponse) {
	e.t.Helper()
	req := httptest.NewRequest(method, "http://localhost"+target, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header[http.CanonicalHeaderKey(k)] = []string{v}
	}
	switch {
	case strings.HasPrefix(target, "/hooks/"):
		req.Header.Set("X-Signature", "sha256="+sign(testHookSecret, body))
	case strings.HasPrefix(target, "/v1/runs/"):
		target := webhook.Target{Method: method, Path: req.URL.EscapedPath(), IdempotencyKey: req.Header.Get("X-Idempotency-Key")}
		req.Header.Set(webhook.HeaderHarvestSignature, webhook.SignBound(testArcFlowSecret, time.Now(), target, []byte(body)))
	}
	rec := httptest.NewRecorder()
	e.s.Handler().ServeHTTP(rec, req)
	var a api.ErrorResponse
	if rec.Code >= 400 {
		require.NoError(e.t, json.Unmarshal(rec.Body.Bytes(), &a), "%d %s", rec.Code, rec.Body)
	}
	return rec.Code, a
}

func sign(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return hex.EncodeToString(m.Sum(nil))
}

// published is how many commands the command stream holds.
func (e *edge) published() uint64 {
	e.t.Helper()
	st, err := e.top.JS.Stream(context.Background(), broker.CommandStream)
	require.NoError(e.t, err)
	info, err := st.Info(context.Background())
	require.NoError(e.t, err)
	return info.State.Msgs
}

// TestUnstorableRequestsAreRefusedBeforeAnythingIsPublished: at every entry
// point, what PostgreSQL cannot store is refused with 400, a code naming
// the field, the field, and the JSON Pointer of a payload's offending
// value; nothing reaches the command stream.
func TestUnstorableRequestsAreRefusedBeforeAnythingIsPublished(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	const (
		start    = "/api/harvest/workflows/w/start"
		signal   = "/api/harvest/executions/" + testExecutionID + "/signals/item"
		sws      = "/api/harvest/workflows/w/signal-with-start"
		cancel   = "/api/harvest/executions/" + testExecutionID + "/cancel"
		runs     = "/v1/runs"
		external = "/v1/runs/" + testExecutionID + "/external/approval"
		hook     = "/hooks/shop"
	)
	for _, tc := range []struct {
		name, target string
		header       map[string]string
		body         string
		status       int
		code, field  string
		pointer      string
		message      string
	}{
		{name: "start input", target: start, body: `{"input": {"a": {"b": "x\u0000"}}}`,
			code: "payload_unstorable", field: "input", pointer: "/input/a/b", message: `input at /a/b: string holds U+0000 (\u0000), which Harvest cannot store`},
		{name: "start input, lone surrogate", target: start, body: `{"input": ["\udc00"]}`, code: "payload_unstorable", field: "input", pointer: "/input/0"},
		{name: "start input, not UTF-8", target: start, body: "{\"input\": \"\xff\"}", code: "payload_unstorable", field: "input", pointer: "/input"},
		{name: "start input, huge number", target: start, body: `{"input": {"n": 1e1000000}}`, code: "payload_unstorable", field: "input", pointer: "/input/n"},
		{name: "start input, numbers that grow", target: start, body: `{"input": [1e40000, 1e40000]}`, code: "payload_unstorable", field: "input", pointer: "/input/1"},
		{name: "start input, too deep", target: start, body: `{"input": ` + strings.Repeat("[", 600) + strings.Repeat("]", 600) + `}`,
			code: "payload_unstorable", field: "input"},
		{name: "start input, member name in another case", target: start, body: `{"INPUT": "\u0000"}`, code: "payload_unstorable", field: "INPUT", pointer: "/INPUT"},
		// A member a start does not have is refused as such first.
		{name: "start unknown member", target: start, body: `{"input": 1, "note": "\ud800"}`, code: "unknown_field", field: "note"},
		{name: "start workflow_id", target: start, body: `{"workflow_id": "order-\u0000"}`, code: "invalid_workflow_id", field: "workflow_id", pointer: "/workflow_id"},
		{name: "start workflow_id in another case", target: start, body: `{"Workflow_ID": "order-\u0000"}`, code: "invalid_workflow_id", field: "workflow_id"},
		{name: "start workflow_id, control character", target: start, body: `{"workflow_id": "order-\n1"}`, code: "invalid_workflow_id", field: "workflow_id",
			message: "workflow_id holds the control character U+000A at byte 6"},
		// encoding/json's Decoder takes a stray ']' or '}' after the value;
		// such a body is not JSON (found by FuzzParseStart).
		{name: "start body with a stray ]", target: start, body: `{"input": 1}]`, code: "invalid_json"},
		{name: "start body with a stray }", target: start, body: `{"input": 1}}`, code: "invalid_json"},
		{name: "start body not UTF-8, with a stray }", target: start, body: "{\"\x81\": 0}}", code: "invalid_json"},
		{name: "start key in the body", target: start, body: `{"idempotency_key": "k\ud800"}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "start key in the body, checked as sent", target: start, body: `{"input": "\u0000", "idempotency_key": "k\ud800"}`,
			code: "invalid_idempotency_key", field: "idempotency_key", message: `idempotency key is not text Harvest accepts: string holds a high surrogate \ud800 with no low surrogate after it, which Harvest cannot store`},
		{name: "start key in the body, control character", target: start, body: `{"idempotency_key": "k\t1"}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "start key in the header", target: start, header: map[string]string{"Idempotency-Key": "k\xff"}, body: `{}`,
			code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "start completion_callback", target: start, body: `{"completion_callback": "https://example.com/\u0000"}`, code: "invalid_completion_callback", field: "completion_callback"},
		{name: "start delay", target: start, body: `{"delay": "1s\u0000"}`, code: "invalid_delay", field: "delay"},
		{name: "start reuse_policy", target: start, body: `{"reuse_policy": "\udfff"}`, code: "invalid_reuse_policy", field: "reuse_policy"},

		{name: "signal payload", target: signal, body: `{"sku": "\u0000"}`, code: "payload_unstorable", field: "payload", pointer: "/sku",
			message: `payload at /sku: string holds U+0000 (\u0000), which Harvest cannot store`},
		{name: "signal payload, a string", target: signal, body: `"\ud800"`, code: "payload_unstorable", field: "payload"},
		{name: "signal key in the header", target: signal, header: map[string]string{"Idempotency-Key": "evt\xff"}, body: `{}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "signal key in the query", target: signal + "?idempotency_key=evt%00", body: `{}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "signal name", target: "/api/harvest/executions/" + testExecutionID + "/signals/it%00em", body: `{}`, code: "invalid_signal_name", field: "name"},
		{name: "signal execution", target: "/api/harvest/executions/" + testExecutionID + "%00/signals/item", body: `{}`, code: "invalid_execution_id", field: "execution_id"},
		{name: "signal name, deprecated path", target: "/api/harvest/workflows/" + testExecutionID + "/signal/it%00em", body: `{}`, code: "invalid_signal_name", field: "signal_name"},
		{name: "signal execution, deprecated path", target: "/api/harvest/workflows/" + testExecutionID + "%00/signal/item", body: `{}`, code: "invalid_execution_id", field: "execution_id"},

		{name: "signal-with-start workflow_id", target: sws, body: `{"workflow_id": "o\u0000", "signal_name": "item"}`, code: "invalid_workflow_id", field: "workflow_id"},
		{name: "signal-with-start workflow_id, control character", target: sws, body: `{"workflow_id": "o\u007f", "signal_name": "item"}`, code: "invalid_workflow_id", field: "workflow_id"},
		{name: "signal-with-start signal_name", target: sws, body: `{"workflow_id": "o", "signal_name": "item\udc00"}`, code: "invalid_signal_name", field: "signal_name"},
		{name: "signal-with-start signal_payload", target: sws, body: `{"workflow_id": "o", "signal_name": "item", "signal_payload": {"n": -1e-99999}}`,
			code: "payload_unstorable", field: "signal_payload", pointer: "/signal_payload/n"},
		{name: "signal-with-start input", target: sws, body: `{"workflow_id": "o", "signal_name": "item", "input": ["\ud800\ud800"]}`,
			code: "payload_unstorable", field: "input", pointer: "/input/0"},
		{name: "signal-with-start key", target: sws, body: `{"workflow_id": "o", "signal_name": "item", "idempotency_key": "\u0000"}`, code: "invalid_idempotency_key", field: "idempotency_key"},

		{name: "cancel reason", target: cancel, body: `{"reason": "stop\u0000"}`, code: "invalid_reason", field: "reason", pointer: "/reason"},

		{name: "run input", target: runs, body: `{"workflow": "w", "input": {"a": "\u0000"}}`, code: "payload_unstorable", field: "input", pointer: "/input/a"},
		{name: "run body with a stray ]", target: runs, body: `{"workflow": "w"}]`, code: "invalid_json"},
		{name: "run workflow", target: runs, body: `{"workflow": "w\u0000"}`, code: "invalid_workflow_name", field: "workflow"},
		{name: "run key", target: runs, header: map[string]string{"Idempotency-Key": "k\x01"}, body: `{"workflow": "w"}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "external callback body", target: external, body: `{"ok": true, "by": "\udc00"}`, code: "payload_unstorable", field: "payload", pointer: "/by"},
		{name: "external callback key", target: external, header: map[string]string{"X-Idempotency-Key": "k\xed\xa0\x80"}, body: `{}`, code: "invalid_idempotency_key", field: "idempotency_key"},
		{name: "external callback binding", target: "/v1/runs/" + testExecutionID + "/external/appr%FFoval", body: `{}`, code: "invalid_binding_id", field: "binding_id"},
		{name: "external callback run", target: "/v1/runs/%00/external/approval", body: `{}`, code: "invalid_execution_id", field: "run_id"},

		{name: "webhook payload", target: hook, body: `{"id": "evt_1", "type": "order.created", "data": {"name": "\u0000"}}`,
			code: "payload_unstorable", field: "payload", pointer: "/data/name"},
		{name: "webhook payload, not UTF-8", target: hook, body: "{\"id\": \"evt_2\", \"type\": \"order.created\", \"data\": \"\xc0\xaf\"}",
			code: "payload_unstorable", field: "payload", pointer: "/data"},
		{name: "webhook body with a stray }", target: hook, body: `{"id": "evt_6", "type": "order.created"}}`, code: "invalid_json"},
		{name: "webhook event id", target: hook, body: `{"id": "evt\n3", "type": "order.created"}`, code: "invalid_event_id", field: "event_id"},
		{name: "webhook workflow_id", target: hook, body: `{"id": "evt_4", "type": "order.item", "order_id": "a\u0001"}`, code: "invalid_workflow_id", field: "workflow_id"},
		{name: "webhook workflow_id, too long", target: hook, body: `{"id": "evt_5", "type": "order.item", "order_id": "` + strings.Repeat("x", 251) + `"}`,
			code: "invalid_workflow_id", field: "workflow_id"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, a := e.do("POST", tc.target, tc.header, tc.body)
			if tc.status == 0 {
				tc.status = http.StatusBadRequest
			}
			require.Equal(t, tc.status, status, "%+v", a)
			require.Equal(t, tc.code, a.Error, a.Message)
			require.Equal(t, tc.field, a.Field, a.Message)
			if tc.pointer != "" {
				require.Equal(t, tc.pointer, a.Pointer)
			}
			if tc.message != "" {
				require.Equal(t, tc.message, a.Message)
			}
		})
	}
	require.Zero(t, e.published(), "a refused request publishes nothing")

	// The generated kinds of poison, at each payload.
	for i, c := range poison.Classic {
		for _, target := range []string{start, signal, sws, runs, external, hook} {
			var body string
			switch target {
			case start:
				body = `{"input": ` + c.JSON + `}`
			case signal, external:
				body = c.JSON
			case sws:
				body = `{"workflow_id": "o", "signal_name": "item", "signal_payload": ` + c.JSON + `}`
			case runs:
				body = `{"workflow": "w", "input": ` + c.JSON + `}`
			case hook:
				body = `{"id": "evt-` + c.Name + `", "type": "order.created", "data": ` + c.JSON + `}`
			}
			status, a := e.do("POST", target, nil, body)
			require.Equal(t, http.StatusBadRequest, status, "%s at %s (%d): %+v", c.Name, target, i, a)
			require.Equal(t, "payload_unstorable", a.Error, "%s at %s: %s", c.Name, target, a.Message)
		}
	}
	require.Zero(t, e.published(), "a refused request publishes nothing")

	// What PostgreSQL stores passes, however odd.
	status, a := e.do("POST", start, nil, `{"workflow_id": "ordér 😀", "input": {"s": "\u00e9\ud83d\ude00\n\u0001\uffff", "n": 1e-16383, "m": 1.7976931348623157e308, "z": 0e1073741822}}`)
	require.Equal(t, http.StatusAccepted, status, "%+v", a)
	status, _ = e.do("POST", hook, nil, `{"id": "evt_ok", "type": "order.viewed", "x": "\u0000"}`)
	require.Equal(t, http.StatusAccepted, status, "an event no rule routes is ignored, whatever it holds")
	require.EqualValues(t, 1, e.published())
}

// BenchmarkStartBody: what the check adds to the decoding of a start's
// body of about 1 MiB.
func BenchmarkStartBody(b *testing.B) {
	body := []byte(`{"input": {"items": [` + strings.TrimSuffix(strings.Repeat(`{"sku": "abc-123", "qty": 2, "note": "naïve"},`, 22000), ",") + `]}}`)
	for _, check := range []bool{false, true} {
		name := "decode"
		if check {
			name = "decode+check"
		}
		b.Run(name, func(b *testing.B) {
			b.SetBytes(int64(len(body)))
			for b.Loop() {
				var req api.StartRequest
				if err := json.NewDecoder(bytes.NewReader(body)).Decode(&req); err != nil {
					b.Fatal(err)
				}
				if !check {
					continue
				}
				if rej := unstorableBody(body, startMembers); rej != nil {
					b.Fatal(rej.body.Message)
				}
			}
		})
	}
}

// TestCommandsTooLargeForTheStreamAre413: a body within the body limit
// whose command the command stream cannot carry (escaping grows "<" six
// times) is refused with 413 command_too_large, which a client must not
// retry, instead of 503, which it would retry for ever; nothing is
// published.
func TestCommandsTooLargeForTheStreamAre413(t *testing.T) {
	t.Parallel()
	e := newEdge(t)
	big := strings.Repeat("<", 300_000)
	for _, c := range []struct{ method, target, body string }{
		{"POST", "/api/harvest/workflows/fulfil/start", `{"input": {"note": "` + big + `"}}`},
		{"POST", "/api/harvest/executions/" + testExecutionID + "/signals/item", `{"note": "` + big + `"}`},
		{"POST", "/api/harvest/workflows/collect/signal-with-start", `{"workflow_id": "w", "signal_name": "item", "signal_payload": {"note": "` + big + `"}}`},
		{"POST", "/hooks/shop", `{"id": "evt-big", "type": "order.created", "note": "` + big + `"}`},
	} {
		status, body := e.do(c.method, c.target, nil, c.body)
		require.Equal(t, http.StatusRequestEntityTooLarge, status, "%s: %+v", c.target, body)
		require.Equal(t, "command_too_large", body.Error, c.target)
		require.NotZero(t, body.Limit, c.target)
	}
	require.Zero(t, e.published())
}
