package ingest_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestKeyedSignalsLandOnce(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	a := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 3}}`)
	require.Equal(t, 201, a.Status, a.Body)
	id := a.Body["execution_id"].(string)

	// The same key five times delivers once.
	var delivered []bool
	for range 5 {
		r := stacktest.Signal(t, s, id, "item", "evt-1", "", `{"n": 1}`)
		require.Equal(t, 202, r.Status, r.Body)
		require.Equal(t, true, r.Body["ok"])
		delivered = append(delivered, r.Body["signal_delivered"].(bool))
	}
	require.Equal(t, []bool{true, false, false, false, false}, delivered)
	require.Len(t, stacktest.SignalEvents(t, s, id), 1)

	// The header beats the query parameter; the query alone is a key too.
	r := stacktest.Signal(t, s, id, "item", "evt-2", "evt-1", `{"n": 2}`)
	require.Equal(t, true, r.Body["signal_delivered"], "evt-2 from the header is new")
	r = stacktest.Signal(t, s, id, "item", "", "evt-2", `{"n": 2}`)
	require.Equal(t, false, r.Body["signal_delivered"], "evt-2 from the query landed already")

	// Distinct keys each land; the third completes the run.
	r = stacktest.Signal(t, s, id, "item", "evt-3", "", `{"n": 3}`)
	require.Equal(t, true, r.Body["signal_delivered"])
	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, []any{map[string]any{"n": 1.0}, map[string]any{"n": 2.0}, map[string]any{"n": 3.0}}, exec["result"].(map[string]any)["items"])

	// After the run finished: a retry of a landed key is still 202 false;
	// a fresh key or an unkeyed signal is 409.
	r = stacktest.Signal(t, s, id, "item", "evt-1", "", `{"n": 1}`)
	require.Equal(t, 202, r.Status)
	require.Equal(t, false, r.Body["signal_delivered"])
	r = stacktest.Signal(t, s, id, "item", "evt-new", "", `{}`)
	require.Equal(t, 409, r.Status, r.Body)
	require.Equal(t, "execution_terminal", r.Body["error"])
	r = stacktest.Signal(t, s, id, "item", "", "", `{}`)
	require.Equal(t, 409, r.Status)
	require.Len(t, stacktest.SignalEvents(t, s, id), 3)
}

func TestSignalScopeAndErrors(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	one := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 5}}`).Body["execution_id"].(string)
	two := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 5}}`).Body["execution_id"].(string)

	// The same key on two executions lands on both.
	require.Equal(t, true, stacktest.Signal(t, s, one, "item", "shared", "", `1`).Body["signal_delivered"])
	require.Equal(t, true, stacktest.Signal(t, s, two, "item", "shared", "", `1`).Body["signal_delivered"])
	// Without a key every call appends one signal.
	for range 3 {
		r := stacktest.Signal(t, s, one, "item", "", "", `"plain"`)
		require.Equal(t, true, r.Body["signal_delivered"])
	}
	require.Len(t, stacktest.SignalEvents(t, s, one), 4)
	require.Len(t, stacktest.SignalEvents(t, s, two), 1)

	empty := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+one+"/signals/item", map[string]string{"Idempotency-Key": " "}, `1`)
	require.Equal(t, 400, empty.Status)
	require.Equal(t, "invalid_idempotency_key", empty.Body["error"])
	unknown := stacktest.Signal(t, s, "01a23712-0000-7000-8000-000000000000", "item", "k", "", `1`)
	require.Equal(t, 404, unknown.Status, unknown.Body)
	require.Equal(t, "execution_not_found", unknown.Body["error"])
	require.Equal(t, 404, stacktest.Signal(t, s, "nope", "item", "", "", `1`).Status, "not an execution id: a workflow_id, maybe")
	require.Equal(t, 400, stacktest.Signal(t, s, "urn:uuid:"+one, "item", "", "", `1`).Status, "an execution id in another spelling")
	bad := stacktest.Signal(t, s, one, "item", "", "", `{"n":`)
	require.Equal(t, 400, bad.Status)
	require.Equal(t, "invalid_json", bad.Body["error"])
	require.Equal(t, 400, stacktest.Signal(t, s, one, "bad.name", "", "", `1`).Status)
	require.Len(t, stacktest.SignalEvents(t, s, one), 4, "refused signals change nothing")
}

// TestTheSignalRouteHasADeprecatedPath: POST
// /api/harvest/executions/{execution_id}/signals/{name} and its deprecated
// path, POST /api/harvest/workflows/{execution_id}/signal/{signal_name},
// are one route: a key delivered through one, by header or query
// parameter, is a duplicate through the other, and both refuse alike,
// each naming its own path parameter for a bad signal name.
func TestTheSignalRouteHasADeprecatedPath(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	id := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 2}}`).Body["execution_id"].(string)
	current := s.URL() + "/api/harvest/executions/" + id + "/signals/"
	deprecated := s.URL() + "/api/harvest/workflows/" + id + "/signal/"
	keyed := func(key string) map[string]string { return map[string]string{"Idempotency-Key": key} }
	delivered := func(r stacktest.Answer) any {
		t.Helper()
		require.Equal(t, 202, r.Status, r.Body)
		require.Equal(t, true, r.Body["ok"], r.Body)
		return r.Body["signal_delivered"]
	}

	require.Equal(t, true, delivered(stacktest.Call(t, "POST", current+"item", keyed("evt-1"), `1`)))
	require.Equal(t, false, delivered(stacktest.Call(t, "POST", deprecated+"item", keyed("evt-1"), `1`)), "evt-1 landed through the current path")
	require.Equal(t, true, delivered(stacktest.Call(t, "POST", deprecated+"item?idempotency_key=evt-2", nil, `2`)))
	require.Equal(t, false, delivered(stacktest.Call(t, "POST", current+"item?idempotency_key=evt-2", nil, `2`)), "evt-2 landed through the deprecated path")
	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, []any{1.0, 2.0}, exec["result"].(map[string]any)["items"])

	for _, c := range []struct{ base, nameField string }{{current, "name"}, {deprecated, "signal_name"}} {
		r := stacktest.Call(t, "POST", c.base+"bad.name", nil, `1`)
		require.Equal(t, 400, r.Status, r.Body)
		require.Equal(t, "invalid_signal_name", r.Body["error"], r.Body)
		require.Equal(t, c.nameField, r.Body["field"], r.Body)
		r = stacktest.Call(t, "POST", c.base+"item", keyed(" "), `1`)
		require.Equal(t, 400, r.Status, r.Body)
		require.Equal(t, "invalid_idempotency_key", r.Body["error"], r.Body)
		r = stacktest.Call(t, "POST", c.base+"item", nil, `{"n":`)
		require.Equal(t, 400, r.Status, r.Body)
		require.Equal(t, "invalid_json", r.Body["error"], r.Body)
		r = stacktest.Call(t, "POST", c.base+"item", nil, `3`)
		require.Equal(t, 409, r.Status, r.Body)
		require.Equal(t, "execution_terminal", r.Body["error"], r.Body)
		require.Equal(t, false, delivered(stacktest.Call(t, "POST", c.base+"item", keyed("evt-1"), `1`)), "a retry after the close")
	}
	require.Len(t, stacktest.SignalEvents(t, s, id), 2, "refused signals change nothing")
}

// TestASignalToAWorkflowIDSaysHowToReachIt: a signal whose path has a
// workflow_id where the execution id goes answers 404 execution_not_found
// on both paths of the route, publishing nothing, and its message says
// how to reach the workflow_id's execution: by its execution id, which
// listing the workflow_id's executions gives, or by signal-with-start.
// Each way works. A segment that can be no workflow_id is still 400
// invalid_execution_id.
func TestASignalToAWorkflowIDSaysHowToReachIt(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	api := s.URL() + "/api/harvest"
	a := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 2}, "workflow_id": "order-7"}`)
	require.Equal(t, 201, a.Status, a.Body)
	id := a.Body["execution_id"].(string)

	for _, target := range []string{api + "/executions/order-7/signals/item", api + "/workflows/order-7/signal/item"} {
		r := stacktest.Call(t, "POST", target, map[string]string{"Idempotency-Key": "evt-1"}, `"a"`)
		require.Equal(t, 404, r.Status, "%s: %v", target, r.Body)
		require.Equal(t, "execution_not_found", r.Body["error"], r.Body)
		require.Equal(t, "execution_id", r.Body["field"], r.Body)
		msg := r.Body["message"].(string)
		require.Contains(t, msg, `no execution "order-7": a signal's path names an execution id, a UUID`)
		require.Contains(t, msg, "GET /api/harvest/executions?workflow_id_prefix=order-7 lists its executions")
		require.Contains(t, msg, `POST /api/harvest/workflows/{workflow}/signal-with-start with {"workflow_id": "order-7", "signal_name": "item"} signals it`)
	}
	require.Empty(t, stacktest.SignalEvents(t, s, id), "nothing was delivered")
	require.Zero(t, deadCommands(t, s), "nothing was published")

	// As the message says: the list gives the execution id to signal…
	list := stacktest.Call(t, "GET", api+"/executions?workflow_id_prefix=order-7", nil, "")
	require.Equal(t, 200, list.Status, list.Body)
	execs := list.Body["executions"].([]any)
	require.Len(t, execs, 1)
	require.Equal(t, id, execs[0].(map[string]any)["execution_id"])
	require.Equal(t, true, stacktest.Signal(t, s, id, "item", "evt-1", "", `"a"`).Body["signal_delivered"])
	// … or signal-with-start signals the workflow_id's running execution.
	sws := stacktest.Call(t, "POST", api+"/workflows/collect/signal-with-start", map[string]string{"Idempotency-Key": "evt-2"},
		`{"workflow_id": "order-7", "signal_name": "item", "signal_payload": "b"}`)
	require.Equal(t, 200, sws.Status, sws.Body)
	require.Equal(t, id, sws.Body["execution_id"])
	require.Equal(t, true, sws.Body["signal_delivered"], sws.Body)
	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, []any{"a", "b"}, exec["result"].(map[string]any)["items"])

	// What can be no workflow_id is no execution id either.
	for _, bad := range []string{"order%017", strings.Repeat("o", 257), "%20"} {
		r := stacktest.Call(t, "POST", api+"/executions/"+bad+"/signals/item", nil, `1`)
		require.Equal(t, 400, r.Status, "%s: %v", bad, r.Body)
		require.Equal(t, "invalid_execution_id", r.Body["error"], "%s: %v", bad, r.Body)
	}
	require.Zero(t, deadCommands(t, s))
}

func TestCollectManySignals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	id := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 10}}`).Body["execution_id"].(string)
	for i := range 10 {
		key := fmt.Sprintf("item-%d", i)
		require.Equal(t, true, stacktest.Signal(t, s, id, "item", key, "", fmt.Sprint(i)).Body["signal_delivered"])
		if i%3 == 0 { // a third of the deliveries repeat
			require.Equal(t, false, stacktest.Signal(t, s, id, "item", key, "", fmt.Sprint(i)).Body["signal_delivered"])
		}
	}
	exec := stacktest.WaitCompleted(t, s, id)
	raw, _ := json.Marshal(exec["result"])
	require.JSONEq(t, `{"items": [0,1,2,3,4,5,6,7,8,9]}`, string(raw))
}

func TestSleepSurvivesOnADurableTimer(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	a := stacktest.StartWorkflow(t, s, "sleep", "", `{"input": {"duration": "1200ms"}}`)
	require.Equal(t, 201, a.Status)
	id := a.Body["execution_id"].(string)
	exec := stacktest.WaitCompleted(t, s, id)
	created, _ := time.Parse(time.RFC3339Nano, exec["created_at"].(string))
	closed, _ := time.Parse(time.RFC3339Nano, exec["closed_at"].(string))
	require.GreaterOrEqual(t, closed.Sub(created), 1200*time.Millisecond)
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "TimerStarted", "TimerFired", "WorkflowTaskCompleted", "WorkflowCompleted"}, stacktest.HistoryTypes(t, s, id))
}

func TestSignalWithStart(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	sws := func(key, body string) stacktest.Answer {
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/collect/signal-with-start", hdr, body)
	}
	first := sws("order-1-created", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "created"}`)
	require.Equal(t, 201, first.Status, first.Body)
	require.Equal(t, true, first.Body["started_fresh"])
	require.Equal(t, true, first.Body["signal_delivered"])
	id := first.Body["execution_id"].(string)
	require.Equal(t, []string{"WorkflowStarted", "SignalReceived"}, stacktest.HistoryTypes(t, s, id)[:2], "the signal is delivered with the start")

	again := sws("order-1-created", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "created"}`)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, id, again.Body["execution_id"])
	require.Equal(t, false, again.Body["signal_delivered"])
	require.Equal(t, false, again.Body["started_fresh"])

	// Another event for the running execution is delivered to it.
	paid := sws("order-1-paid", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "paid"}`)
	require.Equal(t, 200, paid.Status)
	require.Equal(t, id, paid.Body["execution_id"])
	require.Equal(t, true, paid.Body["signal_delivered"])
	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, []any{"created", "paid"}, exec["result"].(map[string]any)["items"])

	// The key's dedupe lasts as long as the execution.
	late := sws("order-1-paid", `{"workflow_id": "order-1", "input": {"count": 2}, "signal_name": "item", "signal_payload": "paid"}`)
	require.Equal(t, 200, late.Status)
	require.Equal(t, id, late.Body["execution_id"])
	require.Equal(t, false, late.Body["signal_delivered"])
	// A new event for a finished workflow_id starts a new run.
	next := sws("order-1-refunded", `{"workflow_id": "order-1", "input": {"count": 1}, "signal_name": "item", "signal_payload": "refunded"}`)
	require.Equal(t, 201, next.Status, next.Body)
	require.NotEqual(t, id, next.Body["execution_id"])
	rej := sws("order-1-x", `{"workflow_id": "order-1", "input": {"count": 1}, "signal_name": "item", "reuse_policy": "reject_duplicate"}`)
	require.Contains(t, []int{200, 409}, rej.Status) // 200 if the refund run still runs

	for _, body := range []string{`{"signal_name": "item"}`, `{"workflow_id": "x"}`, `{"workflow_id": "x", "signal_name": "item", "reuse_policy": "nope"}`} {
		require.Equal(t, 400, sws("", body).Status, body)
	}

	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?workflow=collect&limit=10", nil, "")
	require.Equal(t, 200, list.Status)
	require.Len(t, list.Body["executions"], 2)
	done := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?status=Completed", nil, "")
	require.GreaterOrEqual(t, len(done.Body["executions"].([]any)), 1)
	require.Equal(t, 400, stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?status=Sleeping", nil, "").Status)
}
