package ingest_test

import (
	"context"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestStartKeySources(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})

	// The body field alone is a key.
	a := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 201, a.Status, a.Body)
	b := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 200, b.Status)
	require.Equal(t, a.Body["execution_id"], b.Body["execution_id"])

	// The header wins over the body field.
	c := stacktest.StartWorkflow(t, s, "charge", "header-key", `{`+stacktest.ChargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 201, c.Status, "the header's key is new")
	d := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "header-key"}`)
	require.Equal(t, 200, d.Status)
	require.Equal(t, c.Body["execution_id"], d.Body["execution_id"])

	// Keys are trimmed; exactly 512 bytes is accepted, 513 is not.
	e := stacktest.StartWorkflow(t, s, "charge", "  header-key\t", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, e.Status)
	require.Equal(t, c.Body["execution_id"], e.Body["execution_id"])
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "charge", strings.Repeat("k", 512), `{`+stacktest.ChargeInput+`}`).Status)
	long := stacktest.StartWorkflow(t, s, "charge", strings.Repeat("k", 513), `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 400, long.Status)
	require.Equal(t, "invalid_idempotency_key", long.Body["error"])
	blankBody := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "   "}`)
	require.Equal(t, 400, blankBody.Status)
	require.Equal(t, "invalid_idempotency_key", blankBody.Body["error"])
	reserved := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "conn:1"}`)
	require.Equal(t, 400, reserved.Status)

	// The same key on another workflow is another claim.
	f := stacktest.StartWorkflow(t, s, "onboarding", "header-key", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, f.Status)
	require.Equal(t, 4, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
}

func TestDedupeIgnoresWorkflowIDAndRoutesMintedIDs(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	// Retries that carry different workflow_ids (routed to different
	// shards) converge on one execution.
	a := stacktest.StartWorkflow(t, s, "charge", "k-ids", `{`+stacktest.ChargeInput+`, "workflow_id": "order-a"}`)
	require.Equal(t, 201, a.Status)
	for _, id := range []string{"order-b", "order-c", "order-d"} {
		b := stacktest.StartWorkflow(t, s, "charge", "k-ids", `{`+stacktest.ChargeInput+`, "workflow_id": "`+id+`"}`)
		require.Equal(t, 200, b.Status, b.Body)
		require.Equal(t, a.Body["execution_id"], b.Body["execution_id"])
		require.Equal(t, "order-a", b.Body["workflow_id"])
	}
	// A keyed start without workflow_id gets one minted on its key's
	// shard: naming it explicitly later finds the execution.
	m := stacktest.StartWorkflow(t, s, "charge", "k-minted", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, m.Status)
	again := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "workflow_id": "`+m.Body["workflow_id"].(string)+`"}`)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, m.Body["execution_id"], again.Body["execution_id"])
	require.Equal(t, 2, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
}

func TestReusePolicies(t *testing.T) {
	t.Parallel()
	// unserved is declared, and no worker serves it.
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{DeclaredWorkflows: []string{"unserved"}}})

	// reject_duplicate: 409, and the key's claim is rolled back.
	first := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "workflow_id": "r1"}`)
	require.Equal(t, 201, first.Status)
	rej := stacktest.StartWorkflow(t, s, "charge", "k-rej", `{`+stacktest.ChargeInput+`, "workflow_id": "r1", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 409, rej.Status, rej.Body)
	require.Equal(t, "workflow_id_conflict", rej.Body["error"])
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k-rej'`), "no dangling claim")
	fresh := stacktest.StartWorkflow(t, s, "charge", "k-rej", `{`+stacktest.ChargeInput+`, "workflow_id": "r1-other"}`)
	require.Equal(t, 201, fresh.Status, "the key is free again")

	// A keyed replay never gets a 409.
	replay := stacktest.StartWorkflow(t, s, "charge", "k-rej", `{`+stacktest.ChargeInput+`, "workflow_id": "r1", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 200, replay.Status, replay.Body)
	require.Equal(t, fresh.Body["execution_id"], replay.Body["execution_id"])

	// allow_duplicate (default) returns the existing execution.
	dup := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "workflow_id": "r1", "reuse_policy": "allow_duplicate"}`)
	require.Equal(t, 200, dup.Status)
	require.Equal(t, first.Body["execution_id"], dup.Body["execution_id"])

	// allow_duplicate_failed_only: a completed run is returned, a failed
	// one is replaced.
	stacktest.WaitCompleted(t, s, first.Body["execution_id"].(string))
	kept := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "workflow_id": "r1", "reuse_policy": "allow_duplicate_failed_only"}`)
	require.Equal(t, 200, kept.Status)
	require.Equal(t, first.Body["execution_id"], kept.Body["execution_id"])
	failing := stacktest.StartWorkflow(t, s, "charge", "", `{"input": {"amount_cents": 100, "customer_id": "cus_declined"}, "workflow_id": "f1"}`)
	require.Equal(t, 201, failing.Status)
	probe.Until(t, 30*time.Second, "the charge to fail", func() bool {
		e := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+failing.Body["execution_id"].(string), nil, "")
		return e.Body["status"] == "Failed"
	})
	anew := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "workflow_id": "f1", "reuse_policy": "allow_duplicate_failed_only"}`)
	require.Equal(t, 201, anew.Status, anew.Body)
	require.NotEqual(t, failing.Body["execution_id"], anew.Body["execution_id"])

	// terminate_if_running: a run that no worker serves stays Running
	// until a new start terminates it.
	stuck := stacktest.StartWorkflow(t, s, "unserved", "", `{"workflow_id": "t1"}`)
	require.Equal(t, 201, stuck.Status)
	term := stacktest.StartWorkflow(t, s, "unserved", "", `{"workflow_id": "t1", "reuse_policy": "terminate_if_running"}`)
	require.Equal(t, 201, term.Status, term.Body)
	require.NotEqual(t, stuck.Body["execution_id"], term.Body["execution_id"])
	old := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+stuck.Body["execution_id"].(string), nil, "")
	require.Equal(t, "Terminated", old.Body["status"])
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTerminated"}, stacktest.HistoryTypes(t, s, stuck.Body["execution_id"].(string)))

	bad := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "reuse_policy": "sometimes"}`)
	require.Equal(t, 400, bad.Status)
	require.Equal(t, "invalid_reuse_policy", bad.Body["error"])
}

func TestRetentionWindowAndSweep(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Scheduler: scheduler.Config{StartIdempotencyWindow: time.Hour}})
	a := stacktest.StartWorkflow(t, s, "charge", "k-ret", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, a.Status)
	b := stacktest.StartWorkflow(t, s, "charge", "k-ret", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, b.Status)
	first, err := time.Parse(time.RFC3339Nano, b.Body["first_seen_at"].(string))
	require.NoError(t, err)
	expires, err := time.Parse(time.RFC3339Nano, b.Body["expires_at"].(string))
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), expires.Sub(first).Seconds(), 1, "the configured window")

	// Move the claim past its window: the key starts a fresh execution,
	// even though the broker still remembers the first message's id.
	_, err = s.DB.Exec(context.Background(), `UPDATE start_claims SET expires_at = now() - interval '1 second', created_at = now() - interval '2 hours' WHERE idempotency_key = 'k-ret'`)
	require.NoError(t, err)
	c := stacktest.StartWorkflow(t, s, "charge", "k-ret", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, c.Status, c.Body)
	require.NotEqual(t, a.Body["execution_id"], c.Body["execution_id"])
	d := stacktest.StartWorkflow(t, s, "charge", "k-ret", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, d.Status)
	require.Equal(t, c.Body["execution_id"], d.Body["execution_id"])

	// The sweep deletes expired claims only.
	_, err = s.DB.Exec(context.Background(), `INSERT INTO start_claims (workflow_name, idempotency_key, execution_id, expires_at)
		SELECT 'charge', 'old-' || i, gen_random_uuid(), now() - interval '1 minute' FROM generate_series(1, 25) i`)
	require.NoError(t, err)
	n, err := store.SweepExpiredClaims(context.Background(), s.DB, 10)
	require.NoError(t, err)
	require.EqualValues(t, 10, n, "bounded batches")
	for n == 10 {
		n, err = store.SweepExpiredClaims(context.Background(), s.DB, 10)
		require.NoError(t, err)
	}
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims WHERE expires_at <= now()`))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims`), "the live claim stays")
}

func TestMalformedBodyReplaysACommittedKey(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{MaxBodyBytes: 4096}})
	a := stacktest.StartWorkflow(t, s, "charge", "k-mal", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, a.Status)

	for _, body := range []string{`{"input":`, `not json`, `{"reuse_policy": "bogus"}`, `{"workflow_id": ""}`, `{"input": "` + strings.Repeat("x", 5000) + `"}`,
		`{` + stacktest.ChargeInput + `, "id_reuse_policy": "reject_duplicate"}`} {
		r := stacktest.StartWorkflow(t, s, "charge", "k-mal", body)
		require.Equal(t, 200, r.Status, "body %.40q: %v", body, r.Body)
		require.Equal(t, a.Body["execution_id"], r.Body["execution_id"])
		require.Equal(t, true, r.Body["deduplicated"])
		require.NotEmpty(t, r.Body["first_seen_at"])
		require.NotEmpty(t, r.Body["expires_at"])
	}
	// A body that parses gives its key even when a member is unknown.
	b := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "idempotency_key": "k-mal", "id_reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 200, b.Status, b.Body)
	require.Equal(t, a.Body["execution_id"], b.Body["execution_id"])
	// Without a claim the answer is the rejection the body gets without a key.
	for _, tc := range []struct{ body, code string }{{`{"input":`, "invalid_json"}, {`{"reuse_policy": "bogus"}`, "invalid_reuse_policy"},
		{`{` + stacktest.ChargeInput + `, "id_reuse_policy": "reject_duplicate"}`, "unknown_field"}} {
		withKey := stacktest.StartWorkflow(t, s, "charge", "k-unknown", tc.body)
		without := stacktest.StartWorkflow(t, s, "charge", "", tc.body)
		require.Equal(t, without.Status, withKey.Status)
		require.Equal(t, without.Body, withKey.Body)
		require.Equal(t, tc.code, withKey.Body["error"])
	}
	big := stacktest.StartWorkflow(t, s, "charge", "k-unknown", `{"input": "`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, 413, big.Status)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
}

func TestFingerprintChecking(t *testing.T) {
	t.Parallel()
	strict := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{IdempotencyFingerprint: ingest.FingerprintReject}})
	a := stacktest.StartWorkflow(t, strict, "charge", "k-fp", `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, a.Status)
	same := stacktest.StartWorkflow(t, strict, "charge", "k-fp", `{"input": {"customer_id": "c",   "amount_cents": 100}}`)
	require.Equal(t, 200, same.Status, "key order and spacing do not matter")
	other := stacktest.StartWorkflow(t, strict, "charge", "k-fp", `{"input": {"amount_cents": 999, "customer_id": "c"}}`)
	require.Equal(t, 422, other.Status, other.Body)
	require.Equal(t, "idempotency_key_reused", other.Body["error"])

	// The default answers with the original execution, whatever the body.
	lax := stacktest.Start(t, devstack.Config{})
	b := stacktest.StartWorkflow(t, lax, "charge", "k-fp", `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, b.Status)
	c := stacktest.StartWorkflow(t, lax, "charge", "k-fp", `{"input": {"amount_cents": 999, "customer_id": "c"}}`)
	require.Equal(t, 200, c.Status)
	require.Equal(t, b.Body["execution_id"], c.Body["execution_id"])

	// A per-workflow setting overrides the deployment's.
	mixed := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{FingerprintByWorkflow: map[string]string{"charge": ingest.FingerprintReject}}})
	require.Equal(t, 201, stacktest.StartWorkflow(t, mixed, "charge", "k", `{"input": {"amount_cents": 1, "customer_id": "c"}}`).Status)
	require.Equal(t, 422, stacktest.StartWorkflow(t, mixed, "charge", "k", `{"input": {"amount_cents": 2, "customer_id": "c"}}`).Status)
	require.Equal(t, 201, stacktest.StartWorkflow(t, mixed, "onboarding", "k", `{"input": {"user_id": 1}}`).Status)
	require.Equal(t, 200, stacktest.StartWorkflow(t, mixed, "onboarding", "k", `{"input": {"user_id": 2}}`).Status)
}

func TestDedupeMetrics(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "charge", "k-m", `{`+stacktest.ChargeInput+`}`).Status)
	require.Equal(t, 200, stacktest.StartWorkflow(t, s, "charge", "k-m", `{`+stacktest.ChargeInput+`}`).Status) // broker duplicate
	require.Equal(t, 200, stacktest.StartWorkflow(t, s, "charge", "k-m", `{"input":`).Status)                   // replay from the claim
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	text := string(raw)
	require.Contains(t, text, `harvest_ingest_start_duplicates_total{layer="broker"} 1`)
	require.Contains(t, text, `harvest_ingest_start_duplicates_total{layer="claim"} 1`)
	require.Contains(t, text, `harvest_ingest_starts_total{result="started_fresh"} 1`)
	require.Contains(t, text, `harvest_ingest_starts_total{result="deduplicated"} 2`)
	// The scheduler's and the worker's metrics are on the same registry.
	require.Contains(t, text, "harvest_scheduler_shards_owned ")
	require.Contains(t, text, `harvest_worker_tasks_received_total{kind="workflow",task_queue="default"} `)
	// And the process's own.
	require.Contains(t, text, "go_goroutines ")
	require.Contains(t, text, "process_cpu_seconds_total ")
}

func TestInputSchemaValidation(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	bad := stacktest.StartWorkflow(t, s, "charge", "", `{"input": {"amount_cents": 0, "customer_id": ""}}`)
	require.Equal(t, 422, bad.Status, bad.Body)
	require.Equal(t, "input_invalid", bad.Body["error"])
	fields := map[string]bool{}
	for _, v := range bad.Body["violations"].([]any) {
		fields[v.(map[string]any)["field"].(string)] = true
	}
	require.Equal(t, map[string]bool{"/amount_cents": true, "/customer_id": true}, fields)
	missing := stacktest.StartWorkflow(t, s, "charge", "", `{}`)
	require.Equal(t, 422, missing.Status)

	// A committed keyed start's retry skips the check, whatever its input.
	ok := stacktest.StartWorkflow(t, s, "charge", "k-schema", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, ok.Status)
	replay := stacktest.StartWorkflow(t, s, "charge", "k-schema", `{"input": {"amount_cents": "lots"}}`)
	require.Equal(t, 200, replay.Status, replay.Body)
	require.Equal(t, ok.Body["execution_id"], replay.Body["execution_id"])
	// A fresh key with bad input is refused, and nothing is claimed.
	require.Equal(t, 422, stacktest.StartWorkflow(t, s, "charge", "k-schema-2", `{"input": {"amount_cents": "lots"}}`).Status)
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k-schema-2'`))
	// Workflows without a schema take any input.
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": "anything"}`).Status)
}
