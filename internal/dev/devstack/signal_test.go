package devstack_test

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
)

func signal(t *testing.T, s *devstack.Stack, executionID, name, key, query, payload string) answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	url := s.URL() + "/api/harvest/workflows/" + executionID + "/signal/" + name
	if query != "" {
		url += "?idempotency_key=" + query
	}
	return call(t, "POST", url, hdr, payload)
}

func signalEvents(t *testing.T, s *devstack.Stack, executionID string) []map[string]any {
	t.Helper()
	h := call(t, "GET", s.URL()+"/api/harvest/executions/"+executionID+"/history", nil, "")
	var out []map[string]any
	for _, e := range h.body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "SignalReceived" {
			out = append(out, ev)
		}
	}
	return out
}

func TestKeyedSignalsLandOnce(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	a := start(t, s, "collect", "", `{"input": {"count": 3}}`)
	require.Equal(t, 201, a.status, a.body)
	id := a.body["execution_id"].(string)

	// The same key five times delivers once.
	var delivered []bool
	for range 5 {
		r := signal(t, s, id, "item", "evt-1", "", `{"n": 1}`)
		require.Equal(t, 202, r.status, r.body)
		require.Equal(t, true, r.body["ok"])
		delivered = append(delivered, r.body["signal_delivered"].(bool))
	}
	require.Equal(t, []bool{true, false, false, false, false}, delivered)
	require.Len(t, signalEvents(t, s, id), 1)

	// The header beats the query parameter; the query alone is a key too.
	r := signal(t, s, id, "item", "evt-2", "evt-1", `{"n": 2}`)
	require.Equal(t, true, r.body["signal_delivered"], "evt-2 from the header is new")
	r = signal(t, s, id, "item", "", "evt-2", `{"n": 2}`)
	require.Equal(t, false, r.body["signal_delivered"], "evt-2 from the query landed already")

	// Distinct keys each land; the third completes the run.
	r = signal(t, s, id, "item", "evt-3", "", `{"n": 3}`)
	require.Equal(t, true, r.body["signal_delivered"])
	exec := waitCompleted(t, s, id)
	require.Equal(t, []any{map[string]any{"n": 1.0}, map[string]any{"n": 2.0}, map[string]any{"n": 3.0}}, exec["result"].(map[string]any)["items"])

	// After the run finished: a retry of a landed key is still 202 false;
	// a fresh key or an unkeyed signal is 409.
	r = signal(t, s, id, "item", "evt-1", "", `{"n": 1}`)
	require.Equal(t, 202, r.status)
	require.Equal(t, false, r.body["signal_delivered"])
	r = signal(t, s, id, "item", "evt-new", "", `{}`)
	require.Equal(t, 409, r.status, r.body)
	require.Equal(t, "execution_terminal", r.body["error"])
	r = signal(t, s, id, "item", "", "", `{}`)
	require.Equal(t, 409, r.status)
	require.Len(t, signalEvents(t, s, id), 3)
}

func TestSignalScopeAndErrors(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	one := start(t, s, "collect", "", `{"input": {"count": 5}}`).body["execution_id"].(string)
	two := start(t, s, "collect", "", `{"input": {"count": 5}}`).body["execution_id"].(string)

	// The same key on two executions lands on both.
	require.Equal(t, true, signal(t, s, one, "item", "shared", "", `1`).body["signal_delivered"])
	require.Equal(t, true, signal(t, s, two, "item", "shared", "", `1`).body["signal_delivered"])
	// Without a key every call appends one signal.
	for range 3 {
		r := signal(t, s, one, "item", "", "", `"plain"`)
		require.Equal(t, true, r.body["signal_delivered"])
	}
	require.Len(t, signalEvents(t, s, one), 4)
	require.Len(t, signalEvents(t, s, two), 1)

	empty := call(t, "POST", s.URL()+"/api/harvest/workflows/"+one+"/signal/item", map[string]string{"Idempotency-Key": " "}, `1`)
	require.Equal(t, 400, empty.status)
	require.Equal(t, "invalid_idempotency_key", empty.body["error"])
	unknown := signal(t, s, "01a23712-0000-7000-8000-000000000000", "item", "k", "", `1`)
	require.Equal(t, 404, unknown.status, unknown.body)
	require.Equal(t, "execution_not_found", unknown.body["error"])
	require.Equal(t, 400, signal(t, s, "nope", "item", "", "", `1`).status, "not an execution id")
	bad := signal(t, s, one, "item", "", "", `{"n":`)
	require.Equal(t, 400, bad.status)
	require.Equal(t, "invalid_json", bad.body["error"])
	require.Equal(t, 400, signal(t, s, one, "bad.name", "", "", `1`).status)
	require.Len(t, signalEvents(t, s, one), 4, "refused signals change nothing")
}

func TestCollectManySignals(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	id := start(t, s, "collect", "", `{"input": {"count": 10}}`).body["execution_id"].(string)
	for i := range 10 {
		key := fmt.Sprintf("item-%d", i)
		require.Equal(t, true, signal(t, s, id, "item", key, "", fmt.Sprint(i)).body["signal_delivered"])
		if i%3 == 0 { // a third of the deliveries repeat
			require.Equal(t, false, signal(t, s, id, "item", key, "", fmt.Sprint(i)).body["signal_delivered"])
		}
	}
	exec := waitCompleted(t, s, id)
	raw, _ := json.Marshal(exec["result"])
	require.JSONEq(t, `{"items": [0,1,2,3,4,5,6,7,8,9]}`, string(raw))
}

func TestSleepSurvivesOnADurableTimer(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	a := start(t, s, "sleep", "", `{"input": {"duration": "1200ms"}}`)
	require.Equal(t, 201, a.status)
	id := a.body["execution_id"].(string)
	exec := waitCompleted(t, s, id)
	created, _ := time.Parse(time.RFC3339Nano, exec["created_at"].(string))
	closed, _ := time.Parse(time.RFC3339Nano, exec["closed_at"].(string))
	require.GreaterOrEqual(t, closed.Sub(created), 1200*time.Millisecond)
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "TimerStarted", "TimerFired", "WorkflowTaskCompleted", "WorkflowCompleted"}, historyTypes(t, s, id))
}

func TestSignalWithStart(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	sws := func(key, body string) answer {
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		return call(t, "POST", s.URL()+"/api/harvest/workflows/collect/signal-with-start", hdr, body)
	}
	first := sws("order-1-created", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "created"}`)
	require.Equal(t, 201, first.status, first.body)
	require.Equal(t, true, first.body["started_fresh"])
	require.Equal(t, true, first.body["signal_delivered"])
	id := first.body["execution_id"].(string)
	require.Equal(t, []string{"WorkflowStarted", "SignalReceived"}, historyTypes(t, s, id)[:2], "the signal is delivered with the start")

	again := sws("order-1-created", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "created"}`)
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, id, again.body["execution_id"])
	require.Equal(t, false, again.body["signal_delivered"])
	require.Equal(t, false, again.body["started_fresh"])

	// Another event for the running execution is delivered to it.
	paid := sws("order-1-paid", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "paid"}`)
	require.Equal(t, 200, paid.status)
	require.Equal(t, id, paid.body["execution_id"])
	require.Equal(t, true, paid.body["signal_delivered"])
	exec := waitCompleted(t, s, id)
	require.Equal(t, []any{"created", "paid"}, exec["result"].(map[string]any)["items"])

	// The key's dedupe lasts as long as the execution.
	late := sws("order-1-paid", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "paid"}`)
	require.Equal(t, 200, late.status)
	require.Equal(t, id, late.body["execution_id"])
	require.Equal(t, false, late.body["signal_delivered"])
	// A new event for a finished workflow_id starts a new run.
	next := sws("order-1-refunded", `{"workflow_id": "order-1", "input": {"count": 1}, "signal_name": "item", "signal_payload": "refunded"}`)
	require.Equal(t, 201, next.status, next.body)
	require.NotEqual(t, id, next.body["execution_id"])
	rej := sws("order-1-x", `{"workflow_id": "order-1", "input": {"count": 1}, "signal_name": "item", "reuse_policy": "reject_duplicate"}`)
	require.Contains(t, []int{200, 409}, rej.status) // 200 if the refund run still runs

	for _, body := range []string{`{"signal_name": "item"}`, `{"workflow_id": "x"}`, `{"workflow_id": "x", "signal_name": "item", "reuse_policy": "nope"}`} {
		require.Equal(t, 400, sws("", body).status, body)
	}

	list := call(t, "GET", s.URL()+"/api/harvest/executions?workflow=collect&limit=10", nil, "")
	require.Equal(t, 200, list.status)
	require.Len(t, list.body["executions"], 2)
	done := call(t, "GET", s.URL()+"/api/harvest/executions?status=Completed", nil, "")
	require.GreaterOrEqual(t, len(done.body["executions"].([]any)), 1)
	require.Equal(t, 400, call(t, "GET", s.URL()+"/api/harvest/executions?status=Sleeping", nil, "").status)
}
