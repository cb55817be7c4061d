package devstack_test

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/google/uuid"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
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
// anything is read or published; a signal, cancellation or termination
// of an execution that does not exist is an ordinary 404. None of it
// leaves a dead command. Before, urn:uuid: answered 503 to a read, an
// upper-case id was found by a read and not by a signal, and a signal or
// cancellation in another spelling became a dead command.
func TestExecutionIDsHaveOneForm(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	api := s.URL() + "/api/harvest"
	start := call(t, "POST", api+"/workflows/collect/start", nil, `{"input": {"count": 2}}`)
	require.Equal(t, 201, start.status, start.body)
	id := start.body["execution_id"].(string)
	upper := strings.ToUpper(id)

	// Upper case is the execution, everywhere, answered in lower case.
	got := call(t, "GET", api+"/executions/"+upper, nil, "")
	require.Equal(t, 200, got.status, got.body)
	require.Equal(t, id, got.body["execution_id"])
	require.Equal(t, 200, call(t, "GET", api+"/executions/"+upper+"/history", nil, "").status)
	run := call(t, "GET", s.URL()+"/v1/runs/"+upper, nil, "")
	require.Equal(t, 200, run.status, run.body)
	require.Equal(t, id, run.body["run_id"])
	// A keyed signal to the upper-case id is the signal to the id: sent
	// again in lower case, it is a duplicate.
	sig := call(t, "POST", api+"/workflows/"+upper+"/signal/item", map[string]string{"Idempotency-Key": "k1"}, `{"sku": "A-1"}`)
	require.Equal(t, 202, sig.status, sig.body)
	require.Equal(t, true, sig.body["signal_delivered"], sig.body)
	sig = call(t, "POST", api+"/workflows/"+id+"/signal/item", map[string]string{"Idempotency-Key": "k1"}, `{"sku": "A-1"}`)
	require.Equal(t, 202, sig.status, sig.body)
	require.Equal(t, false, sig.body["signal_delivered"], "one signal, whichever spelling: %v", sig.body)
	require.Len(t, signalEvents(t, s, id), 1)

	// Every other spelling is refused, by every route, and nothing moves.
	hex := strings.ReplaceAll(id, "-", "")
	for _, other := range []string{"urn:uuid:" + id, "URN:UUID:" + upper, "{" + id + "}", hex, strings.ToUpper(hex),
		id + " ", id[:35] + "g", "not-a-uuid"} {
		path := url.PathEscape(other)
		for _, c := range []struct{ method, target, field string }{
			{"GET", api + "/executions/" + path, "execution_id"},
			{"GET", api + "/executions/" + path + "/history", "execution_id"},
			{"POST", api + "/workflows/" + path + "/signal/item", "execution_id"},
			{"POST", api + "/executions/" + path + "/cancel", "execution_id"},
			{"POST", api + "/executions/" + path + "/terminate", "execution_id"},
			{"GET", s.URL() + "/v1/runs/" + path, "run_id"},
			{"POST", s.URL() + "/v1/runs/" + path + "/external/item", "run_id"},
		} {
			r := call(t, c.method, c.target, nil, `{"sku": "B-2"}`)
			require.Equal(t, 400, r.status, "%s %s: %v", c.method, c.target, r.body)
			require.Equal(t, "invalid_execution_id", r.body["error"], "%s %s: %v", c.method, c.target, r.body)
			require.Equal(t, c.field, r.body["field"], "%s %s: %v", c.method, c.target, r.body)
			require.NotEmpty(t, r.body["message"])
		}
	}
	require.Len(t, signalEvents(t, s, id), 1)
	got = call(t, "GET", api+"/executions/"+id, nil, "")
	require.Equal(t, "Running", got.body["status"], got.body)

	// Commands for executions that do not exist are 404, in any case.
	for _, absent := range []string{uuid.NewString(), strings.ToUpper(uuid.NewString())} {
		for _, c := range []struct{ method, target string }{
			{"POST", api + "/workflows/" + absent + "/signal/item"},
			{"POST", api + "/executions/" + absent + "/cancel"},
			{"POST", api + "/executions/" + absent + "/terminate"},
			{"POST", s.URL() + "/v1/runs/" + absent + "/external/item"},
			{"GET", api + "/executions/" + absent},
		} {
			r := call(t, c.method, c.target, nil, `{}`)
			require.Equal(t, 404, r.status, "%s %s: %v", c.method, c.target, r.body)
			require.Equal(t, "execution_not_found", r.body["error"], "%s %s: %v", c.method, c.target, r.body)
		}
	}

	// A cancellation in upper case cancels the execution.
	cancelled := call(t, "POST", api+"/executions/"+upper+"/cancel", nil, `{"reason": "done"}`)
	require.Equal(t, 200, cancelled.status, cancelled.body)
	require.Equal(t, id, cancelled.body["execution_id"])
	require.Equal(t, "Cancelled", cancelled.body["status"])

	require.Zero(t, deadCommands(t, s), "no command was set aside")
	dead := call(t, "GET", api+"/commands/dead", nil, "")
	require.Equal(t, 200, dead.status, dead.body)
	require.Empty(t, dead.body["dead_commands"], dead.body)
}

// TestListAndGateInputIsChecked: a status filter that net/url would drop
// (a ';' in it, a bad escape) is refused with 400 invalid_status instead
// of listing every status, and an admission gate's reason holding U+0000
// or another control character is refused with 400 invalid_reason and
// closes nothing.
func TestListAndGateInputIsChecked(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	api := s.URL() + "/api/harvest"
	start := call(t, "POST", api+"/workflows/collect/start", nil, `{"input": {"count": 1}}`)
	require.Equal(t, 201, start.status, start.body)

	for _, q := range []string{"status=%27;drop", "status=Running;drop", "status=%zz", "workflow=collect&status=%27;drop"} {
		r := call(t, "GET", api+"/executions?"+q, nil, "")
		require.Equal(t, 400, r.status, "%s: %v", q, r.body)
		require.Equal(t, "invalid_status", r.body["error"], "%s: %v", q, r.body)
		require.Equal(t, "status", r.body["field"], "%s: %v", q, r.body)
	}
	r := call(t, "GET", api+"/executions?status=Running", nil, "")
	require.Equal(t, 200, r.status, r.body)
	require.Len(t, r.body["executions"], 1)

	for _, reason := range []string{`"incident\u0000"`, `"\u0000"`, `"line one\nline two"`, `"bell\u0007"`, `"esc\u001b[31mred"`, `"del\u007f"`, `"next\u0085line"`} {
		r := call(t, "POST", api+"/admission/collect/close", nil, `{"reason": `+reason+`}`)
		require.Equal(t, 400, r.status, "%s: %v", reason, r.body)
		require.Equal(t, "invalid_reason", r.body["error"], "%s: %v", reason, r.body)
		require.Equal(t, "reason", r.body["field"])
		require.NotContains(t, r.body["message"], "\x00")
	}
	gates := call(t, "GET", api+"/admission", nil, "")
	require.Equal(t, 200, gates.status, gates.body)
	require.Empty(t, gates.body["closed"], "no gate closed")
	ok := call(t, "POST", api+"/admission/collect/close", nil, `{"reason": "provider incident — see #ops"}`)
	require.Equal(t, 200, ok.status, ok.body)
	require.Equal(t, "provider incident — see #ops", ok.body["reason"])
}
