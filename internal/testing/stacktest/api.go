package stacktest

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// ChargeInput is the input of a start of the example workflow charge, as
// a member of a start's JSON body: `{` + ChargeInput + `}`.
const ChargeInput = `"input": {"amount_cents": 100, "customer_id": "c"}`

// Answer is what the API answered a Call: its status, its header and its
// JSON body.
type Answer struct {
	Status int
	Header http.Header
	Body   map[string]any
}

// Call sends a request with a JSON body (and the headers in header) and
// returns the answer, failing t unless its body is a JSON object.
func Call(t testing.TB, method, url string, header map[string]string, body string) Answer {
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
	a := Answer{Status: resp.StatusCode, Header: resp.Header}
	require.NoError(t, json.Unmarshal(raw, &a.Body), "body: %s", raw)
	return a
}

// StartWorkflow posts a start of workflow to s's API, with the
// Idempotency-Key key unless it is empty, and body as the request's body.
func StartWorkflow(t testing.TB, s *devstack.Stack, workflow, key, body string) Answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	return Call(t, "POST", s.URL()+"/api/harvest/workflows/"+workflow+"/start", hdr, body)
}

// Signal posts signal name to execution executionID, with the
// Idempotency-Key key and the query's idempotency_key query, each unless
// empty, and payload as the body.
func Signal(t testing.TB, s *devstack.Stack, executionID, name, key, query, payload string) Answer {
	t.Helper()
	hdr := map[string]string{}
	if key != "" {
		hdr["Idempotency-Key"] = key
	}
	url := s.URL() + "/api/harvest/executions/" + executionID + "/signals/" + name
	if query != "" {
		url += "?idempotency_key=" + query
	}
	return Call(t, "POST", url, hdr, payload)
}

// SignalEvents is the SignalReceived events of the execution's history.
func SignalEvents(t testing.TB, s *devstack.Stack, executionID string) []map[string]any {
	t.Helper()
	h := Call(t, "GET", s.URL()+"/api/harvest/executions/"+executionID+"/history", nil, "")
	var out []map[string]any
	for _, e := range h.Body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "SignalReceived" {
			out = append(out, ev)
		}
	}
	return out
}

// WaitCompleted waits up to 30 s for execution id to complete, and
// returns what the API says of it.
func WaitCompleted(t testing.TB, s *devstack.Stack, id string) map[string]any {
	t.Helper()
	var exec Answer
	probe.Until(t, 30*time.Second, "execution "+id+" to complete", func() bool {
		exec = Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
		return exec.Status == 200 && exec.Body["status"] == "Completed"
	})
	return exec.Body
}

// WaitStatus waits up to 60 s for execution id to have status, and
// returns what the API says of it.
func WaitStatus(t testing.TB, s *devstack.Stack, id, status string) map[string]any {
	t.Helper()
	var exec Answer
	probe.Until(t, 60*time.Second, "execution "+id+" to be "+status, func() bool {
		exec = Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
		return exec.Body["status"] == status
	})
	return exec.Body
}

// HistoryTypes is the types of the execution's history events, in order;
// it fails t unless they are numbered from 1 and each has a time.
func HistoryTypes(t testing.TB, s *devstack.Stack, id string) []string {
	t.Helper()
	h := Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	require.Equal(t, 200, h.Status)
	var types []string
	for i, e := range h.Body["events"].([]any) {
		ev := e.(map[string]any)
		require.EqualValues(t, i+1, ev["seq"])
		require.NotEmpty(t, ev["at"])
		types = append(types, ev["type"].(string))
	}
	return types
}

// DBCount runs a count query in every store of the stack and adds up the
// counts.
func DBCount(t testing.TB, s *devstack.Stack, sql string, args ...any) int {
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

// ExecDB is the store of the stack that holds execution executionID.
func ExecDB(s *devstack.Stack, executionID string) *pgxpool.Pool {
	if len(s.Pools) == 0 {
		return s.DB
	}
	return s.Pools[s.Topology.Layout().StoreOf(executionID)]
}
