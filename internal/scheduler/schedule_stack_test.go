package scheduler_test

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestDelayedStartsWaitOnADurableTimer(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	a := stacktest.StartWorkflow(t, s, "charge", "k-delay", `{`+stacktest.ChargeInput+`, "delay": "1500ms"}`)
	require.Equal(t, 201, a.Status, a.Body)
	id := a.Body["execution_id"].(string)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM timers WHERE execution_id = $1`, id))
	exec := stacktest.WaitCompleted(t, s, id)
	created, err := time.Parse(time.RFC3339Nano, exec["created_at"].(string))
	require.NoError(t, err)
	h := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	scheduled := h.Body["events"].([]any)[2].(map[string]any)
	require.Equal(t, "ActivityScheduled", scheduled["type"])
	at, err := time.Parse(time.RFC3339Nano, scheduled["at"].(string))
	require.NoError(t, err)
	require.GreaterOrEqual(t, at.Sub(created), 1400*time.Millisecond, "the first task waited for the delay")
	require.Zero(t, stacktest.DBCount(t, s, `SELECT count(*) FROM timers`), "fired timers are gone")

	past := stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`, "start_at": "2020-01-01T00:00:00Z"}`)
	require.Equal(t, 201, past.Status)
	stacktest.WaitCompleted(t, s, past.Body["execution_id"].(string))

	for _, tc := range []struct{ body, code string }{
		{`{"delay": "soon"}`, "invalid_delay"},
		{`{"delay": "-5s"}`, "invalid_delay"},
		{`{"delay": "100000h"}`, "invalid_delay"},
		{`{"start_at": "tomorrow"}`, "invalid_start_at"},
		{`{"start_at": "2999-01-01T00:00:00Z"}`, "invalid_start_at"},
		{`{"delay": "1s", "start_at": "2026-01-01T00:00:00Z"}`, "invalid_schedule"},
	} {
		r := stacktest.StartWorkflow(t, s, "charge", "", tc.body)
		require.Equal(t, 400, r.Status, tc.body)
		require.Equal(t, tc.code, r.Body["error"], tc.body)
		// A committed keyed start's retry is a replay whatever its schedule says.
		replay := stacktest.StartWorkflow(t, s, "charge", "k-delay", tc.body)
		require.Equal(t, 200, replay.Status, tc.body)
		require.Equal(t, id, replay.Body["execution_id"])
	}
}

func TestAdmissionGate(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	committed := stacktest.StartWorkflow(t, s, "charge", "k-gate", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, committed.Status)

	// Close it with the CLI, as an operator would.
	harvest := filepath.Join(t.TempDir(), "harvest")
	out, err := exec.Command("go", "build", "-o", harvest, "github.com/harvest-engine/harvest/cmd/harvest").CombinedOutput()
	require.NoError(t, err, "%s", out)
	out, err = exec.Command(harvest, "admission", "close", "charge", "--reason", "provider incident", "--addr", s.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Contains(t, string(out), "workflow charge: gate closed (provider incident)")

	blocked := stacktest.StartWorkflow(t, s, "charge", "k-new", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 503, blocked.Status, blocked.Body)
	require.Equal(t, "admission_blocked", blocked.Body["error"])
	require.Contains(t, blocked.Body["message"], "provider incident")
	require.Equal(t, 503, stacktest.StartWorkflow(t, s, "charge", "", `{`+stacktest.ChargeInput+`}`).Status)
	// Other workflows and replays of committed starts go through.
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "onboarding", "", `{"input": {"user_id": 1}}`).Status)
	replay := stacktest.StartWorkflow(t, s, "charge", "k-gate", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 200, replay.Status, replay.Body)
	require.Equal(t, committed.Body["execution_id"], replay.Body["execution_id"])

	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/admission", nil, "")
	require.Len(t, list.Body["closed"], 1)

	out, err = exec.Command(harvest, "admission", "open", "charge", "--addr", s.URL()).CombinedOutput()
	require.NoError(t, err, "%s", out)
	require.Equal(t, 201, stacktest.StartWorkflow(t, s, "charge", "k-new", `{`+stacktest.ChargeInput+`}`).Status)

	out, err = exec.Command(harvest, "admission", "close", "charge", "--addr", s.URL()).CombinedOutput()
	require.Error(t, err, "a reason is required")
	require.True(t, strings.Contains(string(out), "reason"), "%s", out)
}
