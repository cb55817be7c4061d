package devstack_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }

// startStack runs a whole stack on a fresh database and NATS server.
func startStack(t *testing.T, cfg devstack.Config) *devstack.Stack {
	t.Helper()
	if cfg.NATSURL == "" {
		cfg.NATSURL = natstest.RunServer(t, natstest.Options{}).ClientURL()
	}
	if cfg.DatabaseURL == "" {
		cfg.DatabaseURL = pgtest.NewDatabase(t)
	}
	if n := testStores(); n > 1 && len(cfg.Stores) == 0 {
		// The contract on several stores (TestTheContractHoldsOnTwoStores):
		// the stack's database is the first.
		for i := range n {
			url := cfg.DatabaseURL
			if i > 0 {
				url = pgtest.NewDatabase(t)
			}
			cfg.Stores = append(cfg.Stores, devstack.StoreConfig{Name: fmt.Sprintf("s%d", i), DatabaseURL: url, Mode: placement.Writable})
		}
	}
	cfg.Addr = "127.0.0.1:0"
	cfg.StateDir = t.TempDir()
	if cfg.Logger == nil {
		cfg.Logger = captureLog(t)
	}
	if cfg.Ingest.OutcomeWait == 0 {
		// Many stacks share two cores under -race: wait longer than a
		// deployment would before answering 202.
		cfg.Ingest.OutcomeWait = 30 * time.Second
	}
	ctx := natstest.Context(t)
	s, err := devstack.Start(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		require.NoError(t, s.Stop(ctx))
	})
	return s
}

type answer struct {
	status int
	header http.Header
	body   map[string]any
}

func call(t *testing.T, method, url string, header map[string]string, body string) answer {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/json")
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.body), "body: %s", raw)
	return a
}

// eventually polls cond until it holds or the deadline passes.
func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", within, what)
		}
		time.Sleep(20 * time.Millisecond) // poll interval, not synchronisation
	}
}

func waitCompleted(t *testing.T, s *devstack.Stack, id string) map[string]any {
	t.Helper()
	var exec answer
	eventually(t, 30*time.Second, "execution "+id+" to complete", func() bool {
		exec = call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
		return exec.status == 200 && exec.body["status"] == "Completed"
	})
	return exec.body
}

func historyTypes(t *testing.T, s *devstack.Stack, id string) []string {
	t.Helper()
	h := call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	require.Equal(t, 200, h.status)
	var types []string
	for i, e := range h.body["events"].([]any) {
		ev := e.(map[string]any)
		require.EqualValues(t, i+1, ev["seq"])
		require.NotEmpty(t, ev["at"])
		types = append(types, ev["type"].(string))
	}
	return types
}

func TestKeyedStartAndRetry(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	url := s.URL() + "/api/harvest/workflows/onboarding/start"
	hdr := map[string]string{"Idempotency-Key": "webhook-evt-abc123"}

	first := call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 201, first.status, first.body)
	require.Equal(t, true, first.body["started_fresh"])
	require.Equal(t, false, first.body["deduplicated"])
	require.Equal(t, "onboarding", first.body["workflow_name"])
	require.Equal(t, "Running", first.body["status"])
	require.NotEmpty(t, first.body["workflow_id"])
	id := first.body["execution_id"].(string)

	again := call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 200, again.status, again.body)
	require.Equal(t, id, again.body["execution_id"])
	require.Equal(t, false, again.body["started_fresh"])
	require.Equal(t, true, again.body["deduplicated"])

	exec := waitCompleted(t, s, id)
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
	}, historyTypes(t, s, id))

	// A retry after completion still converges on the same execution.
	late := call(t, "POST", url, hdr, `{"input": {"user_id": 42}}`)
	require.Equal(t, 200, late.status)
	require.Equal(t, id, late.body["execution_id"])
	require.Equal(t, "Completed", late.body["status"])

	// Each activity performed its effect once, under its own subkey.
	require.Equal(t, 1, s.Services.Users.Effects())
	require.Equal(t, 1, s.Services.Mail.Effects())
}

func TestConcurrentSameKeyStartsMakeOneExecution(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	url := s.URL() + "/api/harvest/workflows/charge/start"
	const n = 24
	answers := make([]answer, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			answers[i] = call(t, "POST", url, map[string]string{"Idempotency-Key": "evt-race"},
				`{"input": {"amount_cents": 500, "customer_id": "cus_1"}}`)
		})
	}
	wg.Wait()
	fresh := 0
	id := answers[0].body["execution_id"]
	for _, a := range answers {
		require.Contains(t, []int{200, 201}, a.status, a.body)
		require.Equal(t, id, a.body["execution_id"])
		if a.status == 201 {
			fresh++
			require.Equal(t, true, a.body["started_fresh"])
		} else {
			require.Equal(t, true, a.body["deduplicated"])
		}
	}
	require.Equal(t, 1, fresh, "exactly one start is fresh")
	exec := waitCompleted(t, s, id.(string))
	require.NotEmpty(t, exec["result"].(map[string]any)["charge_id"])
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"}, historyTypes(t, s, id.(string)))
	require.Equal(t, 1, s.Services.Payments.Charges())

	count := dbCount(t, s, `SELECT count(*) FROM executions`)
	require.Equal(t, 1, count)
}

func TestUnkeyedStartAndErrors(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	base := s.URL() + "/api/harvest"

	a := call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}, "workflow_id": "order-1"}`)
	require.Equal(t, 201, a.status, a.body)
	require.NotContains(t, a.body, "started_fresh")
	require.NotContains(t, a.body, "deduplicated")
	require.Equal(t, "order-1", a.body["workflow_id"])
	b := call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 201, b.status)
	require.NotEqual(t, a.body["execution_id"], b.body["execution_id"], "unkeyed starts are distinct")

	// The same workflow_id again returns the existing execution.
	c := call(t, "POST", base+"/workflows/charge/start", nil, `{"input": {"amount_cents": 100, "customer_id": "c"}, "workflow_id": "order-1"}`)
	require.Equal(t, 200, c.status)
	require.Equal(t, a.body["execution_id"], c.body["execution_id"])

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
		got := call(t, "POST", base+tc.path, hdr, tc.body)
		require.Equal(t, tc.status, got.status, tc.name)
		require.Equal(t, tc.code, got.body["error"], tc.name)
		require.NotEmpty(t, got.body["message"], tc.name)
	}
	count := dbCount(t, s, `SELECT count(*) FROM executions`)
	require.Equal(t, 2, count, "bad requests change nothing")

	nf := call(t, "GET", base+"/executions/00000000-0000-0000-0000-000000000000", nil, "")
	require.Equal(t, 404, nf.status)
	require.Equal(t, "execution_not_found", nf.body["error"])
	nf = call(t, "GET", base+"/executions/not-a-uuid/history", nil, "")
	require.Equal(t, 400, nf.status)
	require.Equal(t, "invalid_execution_id", nf.body["error"])
	require.Equal(t, 200, call(t, "GET", s.URL()+"/healthz", nil, "").status)
	require.Equal(t, 200, call(t, "GET", s.URL()+"/readyz", nil, "").status)
}

func TestSlowOutcomeAnswers202ThenPolls(t *testing.T) {
	t.Parallel()
	// An outcome wait too short for any apply forces the 202 path.
	s := startStack(t, devstack.Config{Ingest: ingest.Config{OutcomeWait: time.Nanosecond}})
	a := call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "slow-1"},
		`{"input": {"amount_cents": 100, "customer_id": "c"}}`)
	require.Equal(t, 202, a.status, a.body)
	require.Equal(t, "accepted", a.body["status"])
	cmd := a.body["command_id"].(string)
	var polled answer
	eventually(t, 30*time.Second, "command outcome", func() bool {
		polled = call(t, "GET", s.URL()+"/api/harvest/commands/"+cmd, nil, "")
		return polled.status == 200 && polled.body["status"] == "applied"
	})
	out := polled.body["outcome"].(map[string]any)
	require.Equal(t, true, out["started_fresh"])
	require.EqualValues(t, 201, polled.body["http_status"])
	waitCompleted(t, s, out["execution_id"].(string))

	nf := call(t, "GET", s.URL()+"/api/harvest/commands/"+fmt.Sprint("01a236e9-0000-7000-8000-000000000000"), nil, "")
	require.Equal(t, 404, nf.status)
	require.Equal(t, "command_not_found", nf.body["error"])
}
