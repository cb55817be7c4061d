package ingest_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func createRun(t *testing.T, s *devstack.Stack, key, body string) stacktest.Answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	return stacktest.Call(t, "POST", s.URL()+"/v1/runs", hdr, body)
}

func TestArcFlowRunsAreCreatedOncePerKey(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	body := `{"workflow": "charge", "input": {"amount_cents": 700, "customer_id": "cus_arc"}}`

	first := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 201, first.Status, first.Body)
	runID := first.Body["run_id"].(string)
	require.NotEmpty(t, runID)
	require.NotEmpty(t, first.Body["trace_id"])
	require.Equal(t, "Running", first.Body["status"])
	require.Len(t, first.Body, 3, "run_id, trace_id and status")

	// A retry with the same key is the same run, with the same trace.
	again := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, runID, again.Body["run_id"])
	require.Equal(t, first.Body["trace_id"], again.Body["trace_id"])

	// It can be polled, with the same trace.
	polled := stacktest.Call(t, "GET", s.URL()+"/v1/runs/"+runID, nil, "")
	require.Equal(t, 200, polled.Status, polled.Body)
	require.Equal(t, runID, polled.Body["run_id"])
	require.Equal(t, first.Body["trace_id"], polled.Body["trace_id"])
	require.Contains(t, []any{"Running", "Completed"}, polled.Body["status"])
	require.Len(t, polled.Body, 3, "run_id, trace_id and status")

	// The run is a Harvest execution.
	exec := stacktest.WaitCompleted(t, s, runID)
	require.Equal(t, "charge", exec["workflow_name"])
	polled = stacktest.Call(t, "GET", s.URL()+"/v1/runs/"+runID, nil, "")
	require.Equal(t, 200, polled.Status, polled.Body)
	require.Equal(t, "Completed", polled.Body["status"])
	for _, c := range []struct {
		target string
		status int
		code   string
	}{
		{"/v1/runs/01a23712-0000-7000-8000-000000000000", 404, "execution_not_found"},
		{"/v1/runs/not-a-run", 400, "invalid_execution_id"},
		{"/v1/runs/" + runID + "?verbose=1", 400, "unknown_parameter"},
	} {
		r := stacktest.Call(t, "GET", s.URL()+c.target, nil, "")
		require.Equal(t, c.status, r.Status, "%s: %v", c.target, r.Body)
		require.Equal(t, c.code, r.Body["error"], "%s: %v", c.target, r.Body)
	}
	done := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", body)
	require.Equal(t, 200, done.Status, done.Body)
	require.Equal(t, "Completed", done.Body["status"], "a retry reports the run's current status")

	// Concurrent retries of a new key collapse into one run.
	const n = 16
	answers := make([]stacktest.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { answers[i] = createRun(t, s, "tenant-7:checkout-42", body) })
	}
	wg.Wait()
	fresh := 0
	for _, a := range answers {
		require.Contains(t, []int{200, 201}, a.Status, a.Body)
		require.Equal(t, answers[0].Body["run_id"], a.Body["run_id"])
		if a.Status == 201 {
			fresh++
		}
	}
	require.Equal(t, 1, fresh, "exactly one create starts the run")
	require.NotEqual(t, runID, answers[0].Body["run_id"])

	// Without a key every create is a new run.
	a, b := createRun(t, s, "", body), createRun(t, s, "", body)
	require.Equal(t, 201, a.Status, a.Body)
	require.Equal(t, 201, b.Status, b.Body)
	require.NotEqual(t, a.Body["run_id"], b.Body["run_id"])
	require.NotEqual(t, a.Body["trace_id"], b.Body["trace_id"])

	var count int
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT count(*) FROM executions WHERE workflow_name = 'charge'`).Scan(&count))
	require.Equal(t, 4, count)

	// A keyed retry of a committed run is answered before the body's
	// own faults; without a claim, an unknown member is refused.
	retried := createRun(t, s, "550e8400-e29b-41d4-a716-446655440000", `{"workflow": "charge", "workflow_name": "charge"}`)
	require.Equal(t, 200, retried.Status, retried.Body)
	require.Equal(t, runID, retried.Body["run_id"])

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
		require.Equal(t, c.status, r.Status, "%s: %v", c.body, r.Body)
		require.Equal(t, c.code, r.Body["error"], "%s: %v", c.body, r.Body)
		require.NotEmpty(t, r.Body["message"])
	}
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT count(*) FROM executions`).Scan(&count))
	require.Equal(t, 4, count)
}

// arcflowSign is the X-Harvest-Signature of a callback to the run's
// binding with key (none when "") and body, made now under secret.
func arcflowSign(secret, runID, binding, key, body string) string {
	return arcflowSignAt(secret, time.Now(), runID, binding, key, body)
}

func arcflowSignAt(secret string, at time.Time, runID, binding, key, body string) string {
	target := webhook.Target{Method: "POST", Path: "/v1/runs/" + runID + "/external/" + binding, IdempotencyKey: key}
	return webhook.SignBound(secret, at, target, []byte(body))
}

// arcflowBodyOnly is the old X-ArcFlow-Signature: the HMAC of the body
// alone.
func arcflowBodyOnly(secret, body string) string {
	m := hmac.New(sha256.New, []byte(secret))
	m.Write([]byte(body))
	return "sha256=" + hex.EncodeToString(m.Sum(nil))
}

// externalCall posts a callback to the run's binding with key (none when
// "") and body, with the headers given.
func externalCall(t *testing.T, s *devstack.Stack, runID, binding, key, body string, hdr map[string]string) stacktest.Answer {
	t.Helper()
	if key != "" {
		hdr["X-Idempotency-Key"] = key
	}
	return stacktest.Call(t, "POST", s.URL()+"/v1/runs/"+runID+"/external/"+binding, hdr, body)
}

func TestArcFlowExternalCallbacksLandOnce(t *testing.T) {
	t.Parallel()
	const secret = "arcflow-test-secret"
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{ArcFlowSecrets: []string{"an-old-secret", secret}}})
	run := createRun(t, s, "", `{"workflow": "collect", "input": {"count": 2}}`)
	require.Equal(t, 201, run.Status, run.Body)
	runID := run.Body["run_id"].(string)

	external := func(runID, binding, key, body, signature string) stacktest.Answer {
		t.Helper()
		hdr := map[string]string{}
		if signature != "" {
			hdr[webhook.HeaderHarvestSignature] = signature
		}
		return externalCall(t, s, runID, binding, key, body, hdr)
	}

	// The first delivery is accepted; a redelivery is already processed.
	body := `{"sku": "A-1"}`
	a := external(runID, "item", "delivery-1", body, arcflowSign(secret, runID, "item", "delivery-1", body))
	require.Equal(t, 202, a.Status, a.Body)
	require.Equal(t, map[string]any{"run_id": runID, "binding_id": "item", "status": "accepted"}, a.Body)
	a = external(runID, "item", "delivery-1", body, arcflowSign(secret, runID, "item", "delivery-1", body))
	require.Equal(t, 202, a.Status, a.Body)
	require.Equal(t, "already_processed", a.Body["status"])

	// Signatures: missing, wrong, or over another body are refused, and
	// deliver nothing.
	for _, sig := range []string{"", arcflowSign("wrong", runID, "item", "delivery-x", body), arcflowSign(secret, runID, "item", "delivery-x", `{"sku": "B-2"}`), "t=1,v1=zz"} {
		r := external(runID, "item", "delivery-x", body, sig)
		require.Equal(t, 401, r.Status, "%q: %v", sig, r.Body)
		require.Equal(t, "invalid_signature", r.Body["error"])
	}
	// The older secret still signs, for rotation; concurrent duplicates of
	// one delivery land once.
	body2 := `{"sku": "B-2"}`
	const n = 8
	answers := make([]stacktest.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = external(runID, "item", "delivery-2", body2, arcflowSign("an-old-secret", runID, "item", "delivery-2", body2))
		})
	}
	wg.Wait()
	accepted := 0
	for _, r := range answers {
		require.Equal(t, 202, r.Status, r.Body)
		if r.Body["status"] == "accepted" {
			accepted++
		} else {
			require.Equal(t, "already_processed", r.Body["status"])
		}
	}
	require.Equal(t, 1, accepted, "one of the concurrent duplicates is delivered")

	exec := stacktest.WaitCompleted(t, s, runID)
	require.Equal(t, map[string]any{"items": []any{map[string]any{"sku": "A-1"}, map[string]any{"sku": "B-2"}}}, exec["result"])
	require.Len(t, stacktest.SignalEvents(t, s, runID), 2)

	// A duplicate after the run closed is still already processed; a new
	// delivery to a closed run is refused; an unknown run is 404.
	a = external(runID, "item", "delivery-1", body, arcflowSign(secret, runID, "item", "delivery-1", body))
	require.Equal(t, 202, a.Status, a.Body)
	require.Equal(t, "already_processed", a.Body["status"])
	a = external(runID, "item", "delivery-3", body, arcflowSign(secret, runID, "item", "delivery-3", body))
	require.Equal(t, 409, a.Status, a.Body)
	require.Equal(t, "execution_terminal", a.Body["error"])
	missing := "0190f5a4-0000-7000-8000-000000000000"
	a = external(missing, "item", "delivery-4", body, arcflowSign(secret, missing, "item", "delivery-4", body))
	require.Equal(t, 404, a.Status, a.Body)
	a = external("not-a-uuid", "item", "delivery-4", body, arcflowSign(secret, "not-a-uuid", "item", "delivery-4", body))
	require.Equal(t, 400, a.Status, a.Body)
	require.Equal(t, "invalid_execution_id", a.Body["error"])
	bad := `{"sku":`
	a = external(runID, "item", "delivery-5", bad, arcflowSign(secret, runID, "item", "delivery-5", bad))
	require.Equal(t, 400, a.Status, a.Body)
	require.Equal(t, "invalid_json", a.Body["error"])
	require.Len(t, stacktest.SignalEvents(t, s, runID), 2)
}

// TestArcFlowCallbackSignaturesCannotBeReplayed: a callback's signature
// is bound to its method, run, binding, idempotency key and time. A
// callback signed for run A, replayed to run B (with its key or another),
// to another binding, with another key, late, or signed over the body
// alone (the old X-ArcFlow-Signature, which the code before took for any
// run) is refused with 401 and delivers nothing; the callback itself
// lands on A, once.
func TestArcFlowCallbackSignaturesCannotBeReplayed(t *testing.T) {
	t.Parallel()
	const secret = "arcflow-replay-secret"
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{ArcFlowSecrets: []string{secret}}})
	runs := make([]string, 2)
	for i := range runs {
		run := createRun(t, s, "", `{"workflow": "collect", "input": {"count": 1}}`)
		require.Equal(t, 201, run.Status, run.Body)
		runs[i] = run.Body["run_id"].(string)
	}
	a, b := runs[0], runs[1]
	body := `{"sku": "A-1"}`
	sig := arcflowSign(secret, a, "item", "delivery-1", body)
	signed := func() map[string]string { return map[string]string{webhook.HeaderHarvestSignature: sig} }

	for _, c := range []struct {
		what, run, binding, key, body string
		hdr                           map[string]string
	}{
		{"to run B, with A's key", b, "item", "delivery-1", body, signed()},
		{"to run B, with a key of its own", b, "item", "delivery-2", body, signed()},
		{"to run B, without a key", b, "item", "", body, signed()},
		{"to another binding", a, "approval", "delivery-1", body, signed()},
		{"with another key", a, "item", "delivery-2", body, signed()},
		{"with another body", a, "item", "delivery-1", `{"sku": "B-2"}`, signed()},
		{"signed six minutes ago", a, "item", "delivery-1", body,
			map[string]string{webhook.HeaderHarvestSignature: arcflowSignAt(secret, time.Now().Add(-6*time.Minute), a, "item", "delivery-1", body)}},
		{"signed six minutes ahead", a, "item", "delivery-1", body,
			map[string]string{webhook.HeaderHarvestSignature: arcflowSignAt(secret, time.Now().Add(6*time.Minute), a, "item", "delivery-1", body)}},
		{"signed over the body alone, to run B", b, "item", "delivery-2", body, map[string]string{ingest.HeaderArcFlowSignature: arcflowBodyOnly(secret, body)}},
		{"signed over the body alone, to run A", a, "item", "delivery-1", body, map[string]string{ingest.HeaderArcFlowSignature: arcflowBodyOnly(secret, body)}},
	} {
		r := externalCall(t, s, c.run, c.binding, c.key, c.body, c.hdr)
		require.Equal(t, 401, r.Status, "%s: %v", c.what, r.Body)
		require.Equal(t, "invalid_signature", r.Body["error"], "%s: %v", c.what, r.Body)
		if _, old := c.hdr[ingest.HeaderArcFlowSignature]; old {
			require.Contains(t, r.Body["message"], webhook.HeaderHarvestSignature, "the answer says how to sign")
		}
	}
	require.Empty(t, stacktest.SignalEvents(t, s, a))
	require.Empty(t, stacktest.SignalEvents(t, s, b))
	polled := stacktest.Call(t, "GET", s.URL()+"/v1/runs/"+b, nil, "")
	require.Equal(t, "Running", polled.Body["status"], "B took nothing")

	// The callback as signed lands on A, once.
	r := externalCall(t, s, a, "item", "delivery-1", body, signed())
	require.Equal(t, 202, r.Status, r.Body)
	require.Equal(t, "accepted", r.Body["status"])
	r = externalCall(t, s, a, "item", "delivery-1", body, signed())
	require.Equal(t, 202, r.Status, r.Body)
	require.Equal(t, "already_processed", r.Body["status"])
	exec := stacktest.WaitCompleted(t, s, a)
	require.Equal(t, map[string]any{"items": []any{map[string]any{"sku": "A-1"}}}, exec["result"])
	require.Empty(t, stacktest.SignalEvents(t, s, b))
}
