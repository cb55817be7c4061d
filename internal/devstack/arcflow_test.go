package devstack_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
)

func createRun(t *testing.T, s *devstack.Stack, key, body string) answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	return call(t, "POST", s.URL()+"/v1/runs", hdr, body)
}

func TestArcFlowRunsAreCreatedOncePerKey(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	body := `{"workflow": "charge", "input": {"amount_cents": 700, "customer_id": "cus_arc"}}`

	first := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 201, first.status, first.body)
	runID := first.body["run_id"].(string)
	require.NotEmpty(t, runID)
	require.NotEmpty(t, first.body["trace_id"])
	require.Equal(t, "Running", first.body["status"])
	require.Len(t, first.body, 3, "run_id, trace_id and status")

	// A retry with the same key is the same run, with the same trace.
	again := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, runID, again.body["run_id"])
	require.Equal(t, first.body["trace_id"], again.body["trace_id"])

	// It can be polled, with the same trace.
	polled := call(t, "GET", s.URL()+"/v1/runs/"+runID, nil, "")
	require.Equal(t, 200, polled.status, polled.body)
	require.Equal(t, runID, polled.body["run_id"])
	require.Equal(t, first.body["trace_id"], polled.body["trace_id"])
	require.Contains(t, []any{"Running", "Completed"}, polled.body["status"])
	require.Len(t, polled.body, 3, "run_id, trace_id and status")

	// The run is a Harvest execution.
	exec := waitCompleted(t, s, runID)
	require.Equal(t, "charge", exec["workflow_name"])
	polled = call(t, "GET", s.URL()+"/v1/runs/"+runID, nil, "")
	require.Equal(t, 200, polled.status, polled.body)
	require.Equal(t, "Completed", polled.body["status"])
	for _, c := range []struct {
		target string
		status int
		code   string
	}{
		{"/v1/runs/01a23712-0000-7000-8000-000000000000", 404, "execution_not_found"},
		{"/v1/runs/not-a-run", 404, "execution_not_found"},
		{"/v1/runs/" + runID + "?verbose=1", 400, "unknown_parameter"},
	} {
		r := call(t, "GET", s.URL()+c.target, nil, "")
		require.Equal(t, c.status, r.status, "%s: %v", c.target, r.body)
		require.Equal(t, c.code, r.body["error"], "%s: %v", c.target, r.body)
	}
	done := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 200, done.status, done.body)
	require.Equal(t, "Completed", done.body["status"], "a retry reports the run's current status")

	// Concurrent retries of a new key collapse into one run.
	const n = 16
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = createRun(t, s, "tenant-7:checkout-42", body) })
	}
	wg.Wait()
	fresh := 0
	for _, a := range answers {
		require.Contains(t, []int{200, 201}, a.status, a.body)
		require.Equal(t, answers[0].body["run_id"], a.body["run_id"])
		if a.status == 201 {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one create starts the run")
	require.NotEqual(t, runID, answers[0].body["run_id"])

	// Without a key every create is a new run.
	a, b := createRun(t, s, "", body), createRun(t, s, "", body)
	require.Equal(t, 201, a.status, a.body)
	require.Equal(t, 201, b.status, b.body)
	require.NotEqual(t, a.body["run_id"], b.body["run_id"])
	require.NotEqual(t, a.body["trace_id"], b.body["trace_id"])

	var count int
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT count(*) FROM executions WHERE workflow_name = 'charge'`).Scan(&count))
	require.Equal(t, 4, count)

	// A keyed retry of a committed run is answered before the body's
	// own faults; without a claim, an unknown member is refused.
	retried := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", `{"workflow": "charge", "workflow_name": "charge"}`)
	require.Equal(t, 200, retried.status, retried.body)
	require.Equal(t, runID, retried.body["run_id"])

	// Bad requests change nothing.
	for _, c := range []struct {
		key, body string
		status    int
		code      string
	}{
		{"", `{"input": {}}`, 400, "missing_workflow"},
		{"", `{"workflow": "no such/name"}`, 400, "invalid_workflow_name"},
		{"", `{"workflow": "charge"`, 400, "invalid_json"},
		{"", `[1, 2]`, 400, "invalid_json"},
		{"conn:forged", body, 400, "invalid_idempotency_key"},
		{"", `{"workflow": "collect", "input": {"count": "three"}}`, 422, "input_invalid"},
		{"", `{"workflow": "charge", "workflow_name": "charge"}`, 400, "unknown_field"},
		{"never-used", `{"workflow": "charge", "workflow_name": "charge"}`, 400, "unknown_field"},
	} {
		r := createRun(t, s, c.key, c.body)
		require.Equal(t, c.status, r.status, "%s: %v", c.body, r.body)
		require.Equal(t, c.code, r.body["error"], "%s: %v", c.body, r.body)
		require.NotEmpty(t, r.body["message"])
	}
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT count(*) FROM executions`).Scan(&count))
	require.Equal(t, 4, count)
}

func arcflowSign(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

func TestArcFlowExternalCallbacksLandOnce(t *testing.T) {
	t.Parallel()
	const secret = "arcflow-test-secret"
	s := startStack(t, devstack.Config{Ingest: ingest.Config{ArcFlowSecrets: []string{"an-old-secret", secret}}})
	run := createRun(t, s, "", `{"workflow": "collect", "input": {"count": 2}}`)
	require.Equal(t, 201, run.status, run.body)
	runID := run.body["run_id"].(string)

	external := func(runID, binding, key, body, signature string) answer {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["X-Idempotency-Key"] = key
		}
		if signature != "" {
			hdr[ingest.HeaderArcFlowSignature] = signature
		}
		return call(t, "POST", s.URL()+"/v1/runs/"+runID+"/external/"+binding, hdr, body)
	}

	// The first delivery is accepted; a redelivery is already processed.
	body := `{"sku": "A-1"}`
	a := external(runID, "item", "delivery-1", body, arcflowSign(secret, body))
	require.Equal(t, 202, a.status, a.body)
	require.Equal(t, map[string]any{"run_id": runID, "binding_id": "item", "status": "accepted"}, a.body)
	a = external(runID, "item", "delivery-1", body, arcflowSign(secret, body))
	require.Equal(t, 202, a.status, a.body)
	require.Equal(t, "already_processed", a.body["status"])

	// Signatures: missing, wrong, or over another body are refused, and
	// deliver nothing.
	for _, sig := range []string{"", arcflowSign("wrong", body), arcflowSign(secret, `{"sku": "B-2"}`), "sha256=zz"} {
		r := external(runID, "item", "delivery-x", body, sig)
		require.Equal(t, 401, r.status, "%q: %v", sig, r.body)
		require.Equal(t, "invalid_signature", r.body["error"])
	}
	// The older secret still signs, for rotation; concurrent duplicates of
	// one delivery land once.
	body2 := `{"sku": "B-2"}`
	const n = 8
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = external(runID, "item", "delivery-2", body2, arcflowSign("an-old-secret", body2)) })
	}
	wg.Wait()
	accepted := 0
	for _, r := range answers {
		require.Equal(t, 202, r.status, r.body)
		if r.body["status"] == "accepted" {
			accepted++
		} else {
			require.Equal(t, "already_processed", r.body["status"])
		}
	}
	require.Equal(t, 1, accepted, "one of the concurrent duplicates is delivered")

	exec := waitCompleted(t, s, runID)
	require.Equal(t, map[string]any{"items": []any{map[string]any{"sku": "A-1"}, map[string]any{"sku": "B-2"}}}, exec["result"])
	require.Len(t, signalEvents(t, s, runID), 2)

	// A duplicate after the run closed is still already processed; a new
	// delivery to a closed run is refused; an unknown run is 404.
	a = external(runID, "item", "delivery-1", body, arcflowSign(secret, body))
	require.Equal(t, 202, a.status, a.body)
	require.Equal(t, "already_processed", a.body["status"])
	a = external(runID, "item", "delivery-3", body, arcflowSign(secret, body))
	require.Equal(t, 409, a.status, a.body)
	require.Equal(t, "execution_terminal", a.body["error"])
	missing := "0190f5a4-0000-7000-8000-000000000000"
	a = external(missing, "item", "delivery-4", body, arcflowSign(secret, body))
	require.Equal(t, 404, a.status, a.body)
	a = external("not-a-uuid", "item", "delivery-4", body, arcflowSign(secret, body))
	require.Equal(t, 404, a.status, a.body)
	bad := `{"sku":`
	a = external(runID, "item", "delivery-5", bad, arcflowSign(secret, bad))
	require.Equal(t, 400, a.status, a.body)
	require.Equal(t, "invalid_json", a.body["error"])
	require.Len(t, signalEvents(t, s, runID), 2)
}
