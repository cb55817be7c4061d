package devstack_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
)

func TestDelayedStartsWaitOnADurableTimer(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	a := start(t, s, "charge", "k-delay", `{`+chargeInput+`, "delay": "1500ms"}`)
	require.Equal(t, 201, a.status, a.body)
	id := a.body["execution_id"].(string)
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM timers WHERE execution_id = $1`, id))
	exec := waitCompleted(t, s, id)
	created, err := time.Parse(time.RFC3339Nano, exec["created_at"].(string))
	require.NoError(t, err)
	h := call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	scheduled := h.body["events"].([]any)[2].(map[string]any)
	require.Equal(t, "ActivityScheduled", scheduled["type"])
	at, err := time.Parse(time.RFC3339Nano, scheduled["at"].(string))
	require.NoError(t, err)
	require.GreaterOrEqual(t, at.Sub(created), 1400*time.Millisecond, "the first task waited for the delay")
	require.Zero(t, dbCount(t, s, `SELECT count(*) FROM timers`), "fired timers are gone")

	past := start(t, s, "charge", "", `{`+chargeInput+`, "start_at": "2020-01-01T00:00:00Z"}`)
	require.Equal(t, 201, past.status)
	waitCompleted(t, s, past.body["execution_id"].(string))

	for _, tc := range []struct{ body, code string }{
		{`{"delay": "soon"}`, "invalid_delay"},
		{`{"delay": "-5s"}`, "invalid_delay"},
		{`{"delay": "100000h"}`, "invalid_delay"},
		{`{"start_at": "tomorrow"}`, "invalid_start_at"},
		{`{"start_at": "2999-01-01T00:00:00Z"}`, "invalid_start_at"},
		{`{"delay": "1s", "start_at": "2026-01-01T00:00:00Z"}`, "invalid_schedule"},
	} {
		r := start(t, s, "charge", "", tc.body)
		require.Equal(t, 400, r.status, tc.body)
		require.Equal(t, tc.code, r.body["error"], tc.body)
		// A committed keyed start's retry is a replay whatever its schedule says.
		replay := start(t, s, "charge", "k-delay", tc.body)
		require.Equal(t, 200, replay.status, tc.body)
		require.Equal(t, id, replay.body["execution_id"])
	}
}

func TestAdmissionGate(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	committed := start(t, s, "charge", "k-gate", `{`+chargeInput+`}`)
	require.Equal(t, 201, committed.status)

	// Close it with the CLI, as an operator would.
	harvest := filepath.Join(t.TempDir(), "harvest")
	out, err := exec.Command("go", "build", "-o", harvest, "github.com/harvest-engine/harvest/cmd/harvest").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(harvest, "admission", "close", "charge", "--reason", "provider incident", "--addr", s.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), `"state": "closed"`)

	blocked := start(t, s, "charge", "k-new", `{`+chargeInput+`}`)
	require.Equal(t, 503, blocked.status, blocked.body)
	require.Equal(t, "admission_blocked", blocked.body["error"])
	require.Contains(t, blocked.body["message"], "provider incident")
	require.Equal(t, 503, start(t, s, "charge", "", `{`+chargeInput+`}`).status)
	// Other workflows and replays of committed starts go through.
	require.Equal(t, 201, start(t, s, "onboarding", "", `{"input": {"user_id": 1}}`).status)
	replay := start(t, s, "charge", "k-gate", `{`+chargeInput+`}`)
	require.Equal(t, 200, replay.status, replay.body)
	require.Equal(t, committed.body["execution_id"], replay.body["execution_id"])

	list := call(t, "GET", s.URL()+"/api/harvest/admission", nil, "")
	require.Len(t, list.body["closed"], 1)

	out, err = exec.Command(harvest, "admission", "open", "charge", "--addr", s.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 201, start(t, s, "charge", "k-new", `{`+chargeInput+`}`).status)

	out, err = exec.Command(harvest, "admission", "close", "charge", "--addr", s.URL()).CombinedOutput()
	require.Error(t, err, "a reason is required")
	require.True(t, strings.Contains(string(out), "reason"), "%s", out)
}
