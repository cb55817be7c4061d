package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestScheduleCreateDescribeFiresPauseDelete: `harvest schedule create`
// makes a schedule that fires every second and prints its next fires;
// describe shows it; fires shows its ledger, a page at a time; pause,
// trigger, backfill and delete say what they did; list shows it; a bad
// spec is refused naming the API's code, and a deleted schedule is
// schedule_not_found.
func TestScheduleCreateDescribeFiresPauseDelete(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	addr := []string{"--addr", s.URL()}
	run := func(args ...string) string {
		t.Helper()
		out, _, err := runCLI(t, append(args, addr...)...)
		require.NoError(t, err, "%v", args)
		return out
	}

	out := run("schedule", "create", "cli-every-second", "--workflow", "charge", "--input", `{"amount_cents": 100, "customer_id": "c"}`,
		"--every", "1s", "--overlap", "allow_all", "--workflow-id-template", "cli-{schedule_id}-{nominal_unix}")
	require.True(t, strings.HasPrefix(out, "created schedule cli-every-second (workflow charge, every 1s)\n"), out)
	require.Contains(t, out, "NEXT_FIRE")
	require.Len(t, strings.Split(strings.TrimSpace(out), "\n"), 7, "a line, a heading and five next fires: %s", out)

	// The same definition from a file replaces it.
	def := filepath.Join(t.TempDir(), "every-second.json")
	require.NoError(t, os.WriteFile(def, []byte(`{"workflow": "charge", "input": {"amount_cents": 100, "customer_id": "c"},
		"spec": {"every": "1s"}, "overlap": "allow_all", "workflow_id_template": "cli-{schedule_id}-{nominal_unix}"}`), 0o600))
	out = run("schedule", "create", "cli-every-second", "--file", def)
	require.True(t, strings.HasPrefix(out, "replaced schedule cli-every-second (workflow charge, every 1s)\n"), out)
	_, _, err := runCLI(t, append([]string{"schedule", "create", "cli-every-second", "--file", def, "--every", "2s"}, addr...)...)
	require.ErrorContains(t, err, "--every: --file holds the whole definition")

	out = run("schedule", "describe", "cli-every-second")
	for _, want := range []string{
		"schedule_id:          cli-every-second\n", "workflow:             charge\n", "state:                active\n",
		"every:                1s\n", "timezone:             UTC\n", "overlap:              allow_all\n", "catchup_window:       1h0m0s\n",
		"workflow_id_template: cli-{schedule_id}-{nominal_unix}\n", "source:               api\n",
		"NEXT_FIRE",
	} {
		require.Contains(t, out, want)
	}
	// The input as stored (PostgreSQL orders its members), on one line.
	require.Regexp(t, `\ninput: +\{("amount_cents":100,"customer_id":"c"|"customer_id":"c","amount_cents":100)\}\n`, out)

	var started map[string]any
	probe.Until(t, 30*time.Second, "two fires to start executions", func() bool {
		out := run("schedule", "fires", "cli-every-second", "--json")
		var page struct {
			Fires []map[string]any `json:"fires"`
		}
		require.NoError(t, json.Unmarshal([]byte(out), &page), out)
		n := 0
		for _, f := range page.Fires {
			if f["outcome"] == "started" {
				n++
				started = f
			}
		}
		return n >= 2
	})
	out = run("schedule", "fires", "cli-every-second")
	require.True(t, strings.HasPrefix(out, "NOMINAL_TIME"), out)
	require.Contains(t, out, started["execution_id"].(string))
	require.Regexp(t, `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.000Z +spec +started +`+started["execution_id"].(string), out)

	// A page of one, and the next by its cursor.
	out = run("schedule", "fires", "cli-every-second", "--limit", "1")
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, "a heading, a fire and the cursor: %s", out)
	cursor, ok := strings.CutPrefix(lines[2], "more: --cursor ")
	require.True(t, ok, out)
	cursor = strings.TrimSuffix(cursor, " (or --all)")
	next := run("schedule", "fires", "cli-every-second", "--limit", "1", "--cursor", cursor)
	require.NotEqual(t, lines[1], strings.Split(next, "\n")[1])
	all := run("schedule", "fires", "cli-every-second", "--limit", "1", "--all")
	require.NotContains(t, all, "more: --cursor")
	require.GreaterOrEqual(t, strings.Count(all, "\n"), 3, all)

	out = run("schedule", "pause", "cli-every-second", "--note", "maintenance")
	require.Equal(t, "paused schedule cli-every-second\n", out)
	out = run("schedule", "describe", "cli-every-second")
	require.Contains(t, out, "state:                paused (maintenance)\n")
	require.Contains(t, out, "last_fire:")
	out = run("schedule", "list")
	require.Contains(t, out, "SCHEDULE_ID")
	require.Regexp(t, `cli-every-second +charge +every 1s +paused \(maintenance\)`, out)
	out = run("schedule", "list", "--json")
	var list struct {
		Schedules []map[string]any `json:"schedules"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Schedules, 1)
	require.Equal(t, true, list.Schedules[0]["paused"])

	out = run("schedule", "trigger", "cli-every-second")
	require.Regexp(t, `^triggered schedule cli-every-second: fired \d{4}-.*Z\n$`, out)
	out = run("schedule", "backfill", "cli-every-second", "--start", "2024-03-01T00:00:00Z", "--end", "2024-03-01T00:00:02Z")
	require.Equal(t, "backfilled schedule cli-every-second: fired 3 times, 2024-03-01T00:00:00.000Z to 2024-03-01T00:00:02.000Z\n", out)
	_, _, err = runCLI(t, append([]string{"schedule", "backfill", "cli-every-second", "--start", "2024-03-02T00:00:00Z", "--end", "2024-03-01T00:00:00Z"}, addr...)...)
	require.ErrorContains(t, err, "invalid_backfill: ")
	out = run("schedule", "unpause", "cli-every-second")
	require.Equal(t, "unpaused schedule cli-every-second\n", out)

	// Refusals print the API's code and message.
	_, _, err = runCLI(t, append([]string{"schedule", "create", "cli-bad", "--workflow", "charge", "--cron", "0 25 * * *"}, addr...)...)
	require.ErrorContains(t, err, "invalid_schedule_spec: ")
	_, _, err = runCLI(t, append([]string{"schedule", "create", "cli-bad", "--workflow", "charge", "--every", "1m", "--timezone", "Mars/Olympus"}, addr...)...)
	require.ErrorContains(t, err, "invalid_timezone: ")
	_, _, err = runCLI(t, append([]string{"schedule", "create", "cli-bad", "--every", "1m"}, addr...)...)
	require.ErrorContains(t, err, "--workflow is required")
	_, _, err = runCLI(t, append([]string{"schedule", "create", "cli-bad", "--workflow", "charge", "--every", "1m", "--start-at", "tomorrow"}, addr...)...)
	require.ErrorContains(t, err, "--start-at \"tomorrow\": want an RFC 3339 time")

	out = run("schedule", "delete", "cli-every-second", "--json")
	var deleted map[string]any
	require.NoError(t, json.Unmarshal([]byte(out), &deleted), out)
	require.Equal(t, map[string]any{"schedule_id": "cli-every-second", "action": "deleted"}, deleted)
	for _, args := range [][]string{
		{"schedule", "describe", "cli-every-second"},
		{"schedule", "fires", "cli-every-second"},
		{"schedule", "delete", "cli-every-second"},
	} {
		_, _, err = runCLI(t, append(args, addr...)...)
		require.ErrorContains(t, err, "schedule_not_found: ", args)
	}
	out = run("schedule", "list")
	require.Equal(t, "SCHEDULE_ID  WORKFLOW  SPEC  STATE  NEXT_FIRE  OVERLAP  SOURCE\n", out)
}

// TestScheduleCommandsSayWhatToDoWhenNothingAnswers: a schedule command
// given an address where nothing listens says to start harvest dev or
// to point --addr at a Harvest, as every API command does.
func TestScheduleCommandsSayWhatToDoWhenNothingAnswers(t *testing.T) {
	t.Parallel()
	addr := closedAddr(t)
	for _, args := range [][]string{
		{"schedule", "list"},
		{"schedule", "describe", "s"},
		{"schedule", "create", "s", "--workflow", "w", "--every", "1m"},
	} {
		_, _, err := runCLI(t, append(args, "--addr", addr)...)
		require.ErrorContains(t, err, "no Harvest API answers at http://"+addr+": ", args)
	}
}
