package devstack_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
)

// dbCount runs a count query in every store of the stack and adds up
// the counts.
func dbCount(t *testing.T, s *devstack.Stack, sql string, args ...any) int {
	t.Helper()
	pools := s.Pools
	if len(pools) == 0 {
		pools = []*pgxpool.Pool{s.DB}
	}
	total := 0
	for _, db := range pools {
		var n int
		if err := db.QueryRow(context.Background(), sql, args...).Scan(&n); !errors.Is(err, pgx.ErrNoRows) {
			require.NoError(t, err)
		}
		total += n
	}
	return total
}

// execDB is the store of the stack that holds the execution id.
func execDB(s *devstack.Stack, executionID string) *pgxpool.Pool {
	if len(s.Pools) == 0 {
		return s.DB
	}
	return s.Pools[s.Topology.Layout().StoreOf(executionID)]
}

func start(t *testing.T, s *devstack.Stack, workflow, key, body string) answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	return call(t, "POST", s.URL()+"/api/harvest/workflows/"+workflow+"/start", hdr, body)
}

const chargeInput = `"input": {"amount_cents": 100, "customer_id": "c"}`

func TestStartKeySources(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})

	// The body field alone is a key.
	a := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 201, a.status, a.body)
	b := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 200, b.status)
	require.Equal(t, a.body["execution_id"], b.body["execution_id"])

	// The header wins over the body field.
	c := start(t, s, "charge", "header-key", `{`+chargeInput+`, "idempotency_key": "body-key"}`)
	require.Equal(t, 201, c.status, "the header's key is new")
	d := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "header-key"}`)
	require.Equal(t, 200, d.status)
	require.Equal(t, c.body["execution_id"], d.body["execution_id"])

	// Keys are trimmed; exactly 512 bytes is accepted, 513 is not.
	e := start(t, s, "charge", "  header-key\t", `{`+chargeInput+`}`)
	require.Equal(t, 200, e.status)
	require.Equal(t, c.body["execution_id"], e.body["execution_id"])
	require.Equal(t, 201, start(t, s, "charge", strings.Repeat("k", 512), `{`+chargeInput+`}`).status)
	long := start(t, s, "charge", strings.Repeat("k", 513), `{`+chargeInput+`}`)
	require.Equal(t, 400, long.status)
	require.Equal(t, "invalid_idempotency_key", long.body["error"])
	blankBody := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "   "}`)
	require.Equal(t, 400, blankBody.status)
	require.Equal(t, "invalid_idempotency_key", blankBody.body["error"])
	reserved := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "conn:1"}`)
	require.Equal(t, 400, reserved.status)

	// The same key on another workflow is another claim.
	f := start(t, s, "onboarding", "header-key", `{"input": {"user_id": 1}}`)
	require.Equal(t, 201, f.status)
	require.Equal(t, 4, dbCount(t, s, `SELECT count(*) FROM executions`))
}

func TestDedupeIgnoresWorkflowIDAndRoutesMintedIDs(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	// Retries that carry different workflow_ids (routed to different
	// shards) converge on one execution.
	a := start(t, s, "charge", "k-ids", `{`+chargeInput+`, "workflow_id": "order-a"}`)
	require.Equal(t, 201, a.status)
	for _, id := range []string{"order-b", "order-c", "order-d"} {
		b := start(t, s, "charge", "k-ids", `{`+chargeInput+`, "workflow_id": "`+id+`"}`)
		require.Equal(t, 200, b.status, b.body)
		require.Equal(t, a.body["execution_id"], b.body["execution_id"])
		require.Equal(t, "order-a", b.body["workflow_id"])
	}
	// A keyed start without workflow_id gets one minted on its key's
	// shard: naming it explicitly later finds the execution.
	m := start(t, s, "charge", "k-minted", `{`+chargeInput+`}`)
	require.Equal(t, 201, m.status)
	again := start(t, s, "charge", "", `{`+chargeInput+`, "workflow_id": "`+m.body["workflow_id"].(string)+`"}`)
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, m.body["execution_id"], again.body["execution_id"])
	require.Equal(t, 2, dbCount(t, s, `SELECT count(*) FROM executions`))
}

func TestReusePolicies(t *testing.T) {
	t.Parallel()
	// unserved is declared, and no worker serves it.
	s := startStack(t, devstack.Config{Ingest: ingest.Config{DeclaredWorkflows: []string{"unserved"}}})

	// reject_duplicate: 409, and the key's claim is rolled back.
	first := start(t, s, "charge", "", `{`+chargeInput+`, "workflow_id": "r1"}`)
	require.Equal(t, 201, first.status)
	rej := start(t, s, "charge", "k-rej", `{`+chargeInput+`, "workflow_id": "r1", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 409, rej.status, rej.body)
	require.Equal(t, "workflow_id_conflict", rej.body["error"])
	require.Zero(t, dbCount(t, s, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k-rej'`), "no dangling claim")
	fresh := start(t, s, "charge", "k-rej", `{`+chargeInput+`, "workflow_id": "r1-other"}`)
	require.Equal(t, 201, fresh.status, "the key is free again")

	// A keyed replay never gets a 409.
	replay := start(t, s, "charge", "k-rej", `{`+chargeInput+`, "workflow_id": "r1", "reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 200, replay.status, replay.body)
	require.Equal(t, fresh.body["execution_id"], replay.body["execution_id"])

	// allow_duplicate (default) returns the existing execution.
	dup := start(t, s, "charge", "", `{`+chargeInput+`, "workflow_id": "r1", "reuse_policy": "allow_duplicate"}`)
	require.Equal(t, 200, dup.status)
	require.Equal(t, first.body["execution_id"], dup.body["execution_id"])

	// allow_duplicate_failed_only: a completed run is returned, a failed
	// one is replaced.
	waitCompleted(t, s, first.body["execution_id"].(string))
	kept := start(t, s, "charge", "", `{`+chargeInput+`, "workflow_id": "r1", "reuse_policy": "allow_duplicate_failed_only"}`)
	require.Equal(t, 200, kept.status)
	require.Equal(t, first.body["execution_id"], kept.body["execution_id"])
	failing := start(t, s, "charge", "", `{"input": {"amount_cents": 100, "customer_id": "cus_declined"}, "workflow_id": "f1"}`)
	require.Equal(t, 201, failing.status)
	eventually(t, 30*time.Second, "the charge to fail", func() bool {
		e := call(t, "GET", s.URL()+"/api/harvest/executions/"+failing.body["execution_id"].(string), nil, "")
		return e.body["status"] == "Failed"
	})
	anew := start(t, s, "charge", "", `{`+chargeInput+`, "workflow_id": "f1", "reuse_policy": "allow_duplicate_failed_only"}`)
	require.Equal(t, 201, anew.status, anew.body)
	require.NotEqual(t, failing.body["execution_id"], anew.body["execution_id"])

	// terminate_if_running: a run that no worker serves stays Running
	// until a new start terminates it.
	stuck := start(t, s, "unserved", "", `{"workflow_id": "t1"}`)
	require.Equal(t, 201, stuck.status)
	term := start(t, s, "unserved", "", `{"workflow_id": "t1", "reuse_policy": "terminate_if_running"}`)
	require.Equal(t, 201, term.status, term.body)
	require.NotEqual(t, stuck.body["execution_id"], term.body["execution_id"])
	old := call(t, "GET", s.URL()+"/api/harvest/executions/"+stuck.body["execution_id"].(string), nil, "")
	require.Equal(t, "Terminated", old.body["status"])
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTerminated"}, historyTypes(t, s, stuck.body["execution_id"].(string)))

	bad := start(t, s, "charge", "", `{`+chargeInput+`, "reuse_policy": "sometimes"}`)
	require.Equal(t, 400, bad.status)
	require.Equal(t, "invalid_reuse_policy", bad.body["error"])
}

func TestRetentionWindowAndSweep(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Scheduler: scheduler.Config{StartIdempotencyWindow: time.Hour}})
	a := start(t, s, "charge", "k-ret", `{`+chargeInput+`}`)
	require.Equal(t, 201, a.status)
	b := start(t, s, "charge", "k-ret", `{`+chargeInput+`}`)
	require.Equal(t, 200, b.status)
	first, err := time.Parse(time.RFC3339Nano, b.body["first_seen_at"].(string))
	require.NoError(t, err)
	expires, err := time.Parse(time.RFC3339Nano, b.body["expires_at"].(string))
	require.NoError(t, err)
	require.InDelta(t, time.Hour.Seconds(), expires.Sub(first).Seconds(), 1, "the configured window")

	// Move the claim past its window: the key starts a fresh execution,
	// even though the broker still remembers the first message's id.
	_, err = s.DB.Exec(context.Background(), `UPDATE start_claims SET expires_at = now() - interval '1 second', created_at = now() - interval '2 hours' WHERE idempotency_key = 'k-ret'`)
	require.NoError(t, err)
	c := start(t, s, "charge", "k-ret", `{`+chargeInput+`}`)
	require.Equal(t, 201, c.status, c.body)
	require.NotEqual(t, a.body["execution_id"], c.body["execution_id"])
	d := start(t, s, "charge", "k-ret", `{`+chargeInput+`}`)
	require.Equal(t, 200, d.status)
	require.Equal(t, c.body["execution_id"], d.body["execution_id"])

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
	require.Zero(t, dbCount(t, s, `SELECT count(*) FROM start_claims WHERE expires_at <= now()`))
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM start_claims`), "the live claim stays")
}

func TestMalformedBodyReplaysACommittedKey(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Ingest: ingest.Config{MaxBodyBytes: 4096}})
	a := start(t, s, "charge", "k-mal", `{`+chargeInput+`}`)
	require.Equal(t, 201, a.status)

	for _, body := range []string{`{"input":`, `not json`, `{"reuse_policy": "bogus"}`, `{"workflow_id": ""}`, `{"input": "` + strings.Repeat("x", 5000) + `"}`,
		`{` + chargeInput + `, "id_reuse_policy": "reject_duplicate"}`} {
		r := start(t, s, "charge", "k-mal", body)
		require.Equal(t, 200, r.status, "body %.40q: %v", body, r.body)
		require.Equal(t, a.body["execution_id"], r.body["execution_id"])
		require.Equal(t, true, r.body["deduplicated"])
		require.NotEmpty(t, r.body["first_seen_at"])
		require.NotEmpty(t, r.body["expires_at"])
	}
	// A body that parses gives its key even when a member is unknown.
	b := start(t, s, "charge", "", `{`+chargeInput+`, "idempotency_key": "k-mal", "id_reuse_policy": "reject_duplicate"}`)
	require.Equal(t, 200, b.status, b.body)
	require.Equal(t, a.body["execution_id"], b.body["execution_id"])
	// Without a claim the answer is the rejection the body gets without a key.
	for _, tc := range []struct{ body, code string }{{`{"input":`, "invalid_json"}, {`{"reuse_policy": "bogus"}`, "invalid_reuse_policy"},
		{`{` + chargeInput + `, "id_reuse_policy": "reject_duplicate"}`, "unknown_field"}} {
		withKey := start(t, s, "charge", "k-unknown", tc.body)
		without := start(t, s, "charge", "", tc.body)
		require.Equal(t, without.status, withKey.status)
		require.Equal(t, without.body, withKey.body)
		require.Equal(t, tc.code, withKey.body["error"])
	}
	big := start(t, s, "charge", "k-unknown", `{"input": "`+strings.Repeat("x", 5000)+`"}`)
	require.Equal(t, 413, big.status)
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
}

func TestFingerprintChecking(t *testing.T) {
	t.Parallel()
	strict := startStack(t, devstack.Config{Ingest: ingest.Config{IdempotencyFingerprint: ingest.FingerprintReject}})
	a := start(t, strict, "charge", "k-fp", `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, a.status)
	same := start(t, strict, "charge", "k-fp", `{"input": {"customer_id": "c",   "amount_cents": 100}}`)
	require.Equal(t, 200, same.status, "key order and spacing do not matter")
	other := start(t, strict, "charge", "k-fp", `{"input": {"amount_cents": 999, "customer_id": "c"}}`)
	require.Equal(t, 422, other.status, other.body)
	require.Equal(t, "idempotency_key_reused", other.body["error"])

	// The default answers with the original execution, whatever the body.
	lax := startStack(t, devstack.Config{})
	b := start(t, lax, "charge", "k-fp", `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, b.status)
	c := start(t, lax, "charge", "k-fp", `{"input": {"amount_cents": 999, "customer_id": "c"}}`)
	require.Equal(t, 200, c.status)
	require.Equal(t, b.body["execution_id"], c.body["execution_id"])

	// A per-workflow setting overrides the deployment's.
	mixed := startStack(t, devstack.Config{Ingest: ingest.Config{FingerprintByWorkflow: map[string]string{"charge": ingest.FingerprintReject}}})
	require.Equal(t, 201, start(t, mixed, "charge", "k", `{"input": {"amount_cents": 1, "customer_id": "c"}}`).status)
	require.Equal(t, 422, start(t, mixed, "charge", "k", `{"input": {"amount_cents": 2, "customer_id": "c"}}`).status)
	require.Equal(t, 201, start(t, mixed, "onboarding", "k", `{"input": {"user_id": 1}}`).status)
	require.Equal(t, 200, start(t, mixed, "onboarding", "k", `{"input": {"user_id": 2}}`).status)
}

func TestDedupeMetrics(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	require.Equal(t, 201, start(t, s, "charge", "k-m", `{`+chargeInput+`}`).status)
	require.Equal(t, 200, start(t, s, "charge", "k-m", `{`+chargeInput+`}`).status) // broker duplicate
	require.Equal(t, 200, start(t, s, "charge", "k-m", `{"input":`).status)         // replay from the claim
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
	s := startStack(t, devstack.Config{})
	bad := start(t, s, "charge", "", `{"input": {"amount_cents": 0, "customer_id": ""}}`)
	require.Equal(t, 422, bad.status, bad.body)
	require.Equal(t, "input_invalid", bad.body["error"])
	fields := map[string]bool{}
	for _, v := range bad.body["violations"].([]any) {
		fields[v.(map[string]any)["field"].(string)] = true
	}
	require.Equal(t, map[string]bool{"/amount_cents": true, "/customer_id": true}, fields)
	missing := start(t, s, "charge", "", `{}`)
	require.Equal(t, 422, missing.status)

	// A committed keyed start's retry skips the check, whatever its input.
	ok := start(t, s, "charge", "k-schema", `{`+chargeInput+`}`)
	require.Equal(t, 201, ok.status)
	replay := start(t, s, "charge", "k-schema", `{"input": {"amount_cents": "lots"}}`)
	require.Equal(t, 200, replay.status, replay.body)
	require.Equal(t, ok.body["execution_id"], replay.body["execution_id"])
	// A fresh key with bad input is refused, and nothing is claimed.
	require.Equal(t, 422, start(t, s, "charge", "k-schema-2", `{"input": {"amount_cents": "lots"}}`).status)
	require.Zero(t, dbCount(t, s, `SELECT count(*) FROM start_claims WHERE idempotency_key = 'k-schema-2'`))
	// Workflows without a schema take any input.
	require.Equal(t, 201, start(t, s, "onboarding", "", `{"input": "anything"}`).status)
}
