package ingest_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// deadCommands is how many commands the scheduler has set aside.
func deadCommands(t *testing.T, s *devstack.Stack) int {
	t.Helper()
	var n int
	require.NoError(t, s.DB.QueryRow(context.Background(), `SELECT count(*) FROM dead_commands`).Scan(&n))
	return n
}

// TestExecutionIDsHaveOneForm: an execution id in upper case is taken as
// the lower-case id the API answers with, by every route; the other
// spellings uuid.Parse takes (urn:uuid:, braces, 32 hex digits) and ids
// that are no UUID are refused with 400 invalid_execution_id before
// anything is read or published, but for a signal, to which an id that is
// no UUID is a workflow_id sent for an execution id: 404
// execution_not_found, also before anything is published; a signal,
// cancellation or termination of an execution that does not exist is an
// ordinary 404. None of it leaves a dead command. Before, urn:uuid: answered 503 to a read, an
// upper-case id was found by a read and not by a signal, and a signal or
// cancellation in another spelling became a dead command.
func TestExecutionIDsHaveOneForm(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	api := s.URL() + "/api/harvest"
	start := stacktest.Call(t, "POST", api+"/workflows/collect/start", nil, `{"input": {"count": 2}}`)
	require.Equal(t, 201, start.Status, start.Body)
	id := start.Body["execution_id"].(string)
	upper := strings.ToUpper(id)

	// Upper case is the execution, everywhere, answered in lower case.
	got := stacktest.Call(t, "GET", api+"/executions/"+upper, nil, "")
	require.Equal(t, 200, got.Status, got.Body)
	require.Equal(t, id, got.Body["execution_id"])
	require.Equal(t, 200, stacktest.Call(t, "GET", api+"/executions/"+upper+"/history", nil, "").Status)
	run := stacktest.Call(t, "GET", s.URL()+"/v1/runs/"+upper, nil, "")
	require.Equal(t, 200, run.Status, run.Body)
	require.Equal(t, id, run.Body["run_id"])
	// A keyed signal to the upper-case id is the signal to the id: sent
	// again in lower case, on either path of the signal route, it is a
	// duplicate.
	sig := stacktest.Call(t, "POST", api+"/executions/"+upper+"/signals/item", map[string]string{"Idempotency-Key": "k1"}, `{"sku": "A-1"}`)
	require.Equal(t, 202, sig.Status, sig.Body)
	require.Equal(t, true, sig.Body["signal_delivered"], sig.Body)
	for _, target := range []string{api + "/executions/" + id + "/signals/item", api + "/workflows/" + id + "/signal/item"} {
		sig = stacktest.Call(t, "POST", target, map[string]string{"Idempotency-Key": "k1"}, `{"sku": "A-1"}`)
		require.Equal(t, 202, sig.Status, sig.Body)
		require.Equal(t, false, sig.Body["signal_delivered"], "one signal, whichever spelling: %s: %v", target, sig.Body)
	}
	require.Len(t, stacktest.SignalEvents(t, s, id), 1)

	// Every other spelling is refused, by every route, and nothing moves.
	hex := strings.ReplaceAll(id, "-", "")
	for _, other := range []string{"urn:uuid:" + id, "URN:UUID:" + upper, "{" + id + "}", hex, strings.ToUpper(hex),
		id + " ", id[:35] + "g", "not-a-uuid"} {
		path := url.PathEscape(other)
		_, notUUID := uuid.Parse(other)
		for _, c := range []struct {
			method, target, field string
			signal                bool
		}{
			{"GET", api + "/executions/" + path, "execution_id", false},
			{"GET", api + "/executions/" + path + "/history", "execution_id", false},
			{"POST", api + "/executions/" + path + "/signals/item", "execution_id", true},
			{"POST", api + "/workflows/" + path + "/signal/item", "execution_id", true},
			{"POST", api + "/executions/" + path + "/cancel", "execution_id", false},
			{"POST", api + "/executions/" + path + "/terminate", "execution_id", false},
			{"GET", s.URL() + "/v1/runs/" + path, "run_id", false},
			{"POST", s.URL() + "/v1/runs/" + path + "/external/item", "run_id", false},
		} {
			r := stacktest.Call(t, c.method, c.target, nil, `{"sku": "B-2"}`)
			if c.signal && notUUID != nil {
				require.Equal(t, 404, r.Status, "%s %s: %v", c.method, c.target, r.Body)
				require.Equal(t, "execution_not_found", r.Body["error"], "%s %s: %v", c.method, c.target, r.Body)
				require.Contains(t, r.Body["message"], "is a workflow_id", "%s %s: %v", c.method, c.target, r.Body)
				continue
			}
			require.Equal(t, 400, r.Status, "%s %s: %v", c.method, c.target, r.Body)
			require.Equal(t, "invalid_execution_id", r.Body["error"], "%s %s: %v", c.method, c.target, r.Body)
			require.Equal(t, c.field, r.Body["field"], "%s %s: %v", c.method, c.target, r.Body)
			require.NotEmpty(t, r.Body["message"])
		}
	}
	require.Len(t, stacktest.SignalEvents(t, s, id), 1)
	got = stacktest.Call(t, "GET", api+"/executions/"+id, nil, "")
	require.Equal(t, "Running", got.Body["status"], got.Body)

	// Commands for executions that do not exist are 404, in any case.
	for _, absent := range []string{uuid.NewString(), strings.ToUpper(uuid.NewString())} {
		for _, c := range []struct{ method, target string }{
			{"POST", api + "/executions/" + absent + "/signals/item"},
			{"POST", api + "/workflows/" + absent + "/signal/item"},
			{"POST", api + "/executions/" + absent + "/cancel"},
			{"POST", api + "/executions/" + absent + "/terminate"},
			{"POST", s.URL() + "/v1/runs/" + absent + "/external/item"},
			{"GET", api + "/executions/" + absent},
		} {
			r := stacktest.Call(t, c.method, c.target, nil, `{}`)
			require.Equal(t, 404, r.Status, "%s %s: %v", c.method, c.target, r.Body)
			require.Equal(t, "execution_not_found", r.Body["error"], "%s %s: %v", c.method, c.target, r.Body)
		}
	}

	// A cancellation in upper case cancels the execution: its code, told,
	// closes it.
	cancelled := stacktest.Call(t, "POST", api+"/executions/"+upper+"/cancel", nil, `{"reason": "done"}`)
	require.Equal(t, 200, cancelled.Status, cancelled.Body)
	require.Equal(t, id, cancelled.Body["execution_id"])
	require.Equal(t, true, cancelled.Body["cancel_requested"], cancelled.Body)
	stacktest.WaitStatus(t, s, id, "Cancelled")

	require.Zero(t, deadCommands(t, s), "no command was set aside")
	dead := stacktest.Call(t, "GET", api+"/commands/dead", nil, "")
	require.Equal(t, 200, dead.Status, dead.Body)
	require.Empty(t, dead.Body["dead_commands"], dead.Body)
}

// TestListAndGateInputIsChecked: a status filter that net/url would drop
// (a ';' in it, a bad escape) is refused with 400 invalid_status instead
// of listing every status, and an admission gate's reason holding U+0000
// or another control character is refused with 400 invalid_reason and
// closes nothing.
func TestListAndGateInputIsChecked(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	api := s.URL() + "/api/harvest"
	start := stacktest.Call(t, "POST", api+"/workflows/collect/start", nil, `{"input": {"count": 1}}`)
	require.Equal(t, 201, start.Status, start.Body)

	for _, q := range []string{"status=%27;drop", "status=Running;drop", "status=%zz", "workflow=collect&status=%27;drop"} {
		r := stacktest.Call(t, "GET", api+"/executions?"+q, nil, "")
		require.Equal(t, 400, r.Status, "%s: %v", q, r.Body)
		require.Equal(t, "invalid_status", r.Body["error"], "%s: %v", q, r.Body)
		require.Equal(t, "status", r.Body["field"], "%s: %v", q, r.Body)
	}
	r := stacktest.Call(t, "GET", api+"/executions?status=Running", nil, "")
	require.Equal(t, 200, r.Status, r.Body)
	require.Len(t, r.Body["executions"], 1)

	for _, reason := range []string{`"incident\u0000"`, `"\u0000"`, `"line one\nline two"`, `"bell\u0007"`, `"esc\u001b[31mred"`, `"del\u007f"`, `"next\u0085line"`} {
		r := stacktest.Call(t, "POST", api+"/admission/collect/close", nil, `{"reason": `+reason+`}`)
		require.Equal(t, 400, r.Status, "%s: %v", reason, r.Body)
		require.Equal(t, "invalid_reason", r.Body["error"], "%s: %v", reason, r.Body)
		require.Equal(t, "reason", r.Body["field"])
		require.NotContains(t, r.Body["message"], "\x00")
	}
	gates := stacktest.Call(t, "GET", api+"/admission", nil, "")
	require.Equal(t, 200, gates.Status, gates.Body)
	require.Empty(t, gates.Body["closed"], "no gate closed")
	ok := stacktest.Call(t, "POST", api+"/admission/collect/close", nil, `{"reason": "provider incident — see #ops"}`)
	require.Equal(t, 200, ok.Status, ok.Body)
	require.Equal(t, "provider incident — see #ops", ok.Body["reason"])
}
