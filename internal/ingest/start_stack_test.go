package ingest_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestKeyedStartAndRetry(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	url := s.URL() + "/api/harvest/workflows/onboarding/start"
	hdr := map[string]string{"Idempotency-Key": "webhook-evt-abc123"}

	first := stacktest.Call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 201, first.Status, first.Body)
	require.Equal(t, true, first.Body["started_fresh"])
	require.Equal(t, false, first.Body["deduplicated"])
	require.Equal(t, "onboarding", first.Body["workflow_name"])
	require.Equal(t, "Running", first.Body["status"])
	require.NotEmpty(t, first.Body["workflow_id"])
	id := first.Body["execution_id"].(string)

	again := stacktest.Call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, id, again.Body["execution_id"])
	require.Equal(t, false, again.Body["started_fresh"])
	require.Equal(t, true, again.Body["deduplicated"])

	exec := stacktest.WaitCompleted(t, s, id)
	require.Equal(t, map[string]any{"user_id": 42.0}, exec["input"])
	result := exec["result"].(map[string]any)
	require.Equal(t, "db-user-42", result["db_user"])
	require.Nil(t, exec["error"])
	require.NotEmpty(t, exec["created_at"])

	require.Equal(t, []string{
		"WorkflowStarted",
		"WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted",
		"WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted",
		"WorkflowTaskCompleted", "WorkflowCompleted",
	}, stacktest.HistoryTypes(t, s, id))

	// A retry after completion still converges on the same execution.
	late := stacktest.Call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 200, late.Status)
	require.Equal(t, id, late.Body["execution_id"])
	require.Equal(t, "Completed", late.Body["status"])

	// Each activity performed its effect once, under its own subkey.
	require.Equal(t, 1, s.Services.Users.Effects())
	require.Equal(t, 1, s.Services.Mail.Effects())
}

func TestConcurrentSameKeyStartsMakeOneExecution(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	url := s.URL() + "/api/harvest/workflows/charge/start"
	const n = 24
	answers := make([]stacktest.Answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = stacktest.Call(t, "POST", url, map[string]string{"Idempotency-Key": "evt-race"},
				`{"input": {"amount_cents": 500, "customer_id": "cus_1"}}`)
		})
	}
	wg.Wait()
	fresh := 0
	id := answers[0].Body["execution_id"]
	for _, a := range answers {
		require.Contains(t, []int{200, 201}, a.Status, a.Body)
		require.Equal(t, id, a.Body["execution_id"])
		if a.Status == 201 {
			fresh++
			require.Equal(t, true, a.Body["started_fresh"])
		} else {
			require.Equal(t, true, a.Body["deduplicated"])
		}
	}
	require.Equal(t, 1, fresh, "exactly one start is fresh")
	exec := stacktest.WaitCompleted(t, s, id.(string))
	require.NotEmpty(t, exec["result"].(map[string]any)["charge_id"])
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"}, stacktest.HistoryTypes(t, s, id.(string)))
	require.Equal(t, 1, s.Services.Payments.Charges())

	count := stacktest.DBCount(t, s, `SELECT count(*) FROM executions`)
	require.Equal(t, 1, count)
}

func TestUnkeyedStartAndErrors(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	base := s.URL() + "/api/harvest"

	a := stacktest.Call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}, "workflow_id": "order-1"}`)
	require.Equal(t, 201, a.Status, a.Body)
	require.NotContains(t, a.Body, "started_fresh")
	require.NotContains(t, a.Body, "deduplicated")
	require.Equal(t, "order-1", a.Body["workflow_id"])
	b := stacktest.Call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, b.Status)
	require.NotEqual(t, a.Body["execution_id"], b.Body["execution_id"], "unkeyed starts are distinct")

	// The same workflow_id again returns the existing execution.
	c := stacktest.Call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}, "workflow_id": "order-1"}`)
	require.Equal(t, 200, c.Status)
	require.Equal(t, a.Body["execution_id"], c.Body["execution_id"])

	for _, tc := range []struct {
		name, path, key, body, code string
		status                      int
	}{
		{"blank key", "/workflows/charge/start", "  ", `{}`, "invalid_idempotency_key", 400},
		{"reserved key", "/workflows/charge/start", "conn:x", `{}`, "invalid_idempotency_key", 400},
		{"bad json", "/workflows/charge/start", "", `{"input":`, "invalid_json", 400},
		{"bad name", "/workflows/no.dots/start", "", `{}`, "invalid_workflow_name", 400},
		{"blank workflow id", "/workflows/charge/start", "", `{"workflow_id": ""}`, "invalid_workflow_id", 400},
	} {
		hdr := map[string]string{}
		if tc.key != "" {
			hdr["Idempotency-Key"] = tc.key
		}
		got := stacktest.Call(t, "POST", base+tc.path, hdr, tc.body)
		require.Equal(t, tc.status, got.Status, tc.name)
		require.Equal(t, tc.code, got.Body["error"], tc.name)
		require.NotEmpty(t, got.Body["message"], tc.name)
	}
	count := stacktest.DBCount(t, s, `SELECT count(*) FROM executions`)
	require.Equal(t, 2, count, "bad requests change nothing")

	nf := stacktest.Call(t, "GET", base+"/executions/00000000-0000-0000-0000-000000000000", nil, "")
	require.Equal(t, 404, nf.Status)
	require.Equal(t, "execution_not_found", nf.Body["error"])
	nf = stacktest.Call(t, "GET", base+"/executions/not-a-uuid/history", nil, "")
	require.Equal(t, 400, nf.Status)
	require.Equal(t, "invalid_execution_id", nf.Body["error"])
	require.Equal(t, 200, stacktest.Call(t, "GET", s.URL()+"/healthz", nil, "").Status)
	require.Equal(t, 200, stacktest.Call(t, "GET", s.URL()+"/readyz", nil, "").Status)
}

func TestSlowOutcomeAnswers202ThenPolls(t *testing.T) {
	t.Parallel()
	// An outcome wait too short for any apply forces the 202 path.
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{OutcomeWait: time.Nanosecond}})
	a := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "slow-1"},
		`{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 202, a.Status, a.Body)
	require.Equal(t, "accepted", a.Body["status"])
	cmd := a.Body["command_id"].(string)
	var polled stacktest.Answer
	probe.Until(t, 30*time.Second, "command outcome", func() bool {
		polled = stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+cmd, nil, "")
		return polled.Status == 200 && polled.Body["status"] == "applied"
	})
	out := polled.Body["outcome"].(map[string]any)
	require.Equal(t, true, out["started_fresh"])
	require.EqualValues(t, 201, polled.Body["http_status"])
	stacktest.WaitCompleted(t, s, out["execution_id"].(string))

	nf := stacktest.Call(t, "GET", s.URL()+"/api/harvest/commands/"+fmt.Sprint("01a236e9-0000-7000-8000-000000000000"), nil, "")
	require.Equal(t, 404, nf.Status)
	require.Equal(t, "command_not_found", nf.Body["error"])
}
