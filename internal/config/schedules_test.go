package config_test

import (
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

func TestSchedulesAreDeclaredInTheConfiguration(t *testing.T) {
	path := filepath.Join(t.TempDir(), "harvest.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
workflows:
  report:
    search_attributes: {region: keyword}
schedules:
  nightly-report:
    workflow: report
    input: {region: eu, days: 1}
    search_attributes: {region: eu}
    spec:
      cron: ["0 3 * * *"]
      timezone: Europe/Berlin
      start_at: 2026-01-01T00:00:00Z
      jitter: 5m
    overlap: buffer_one
    catchup_window: 6h
    pause_on_failure: true
`), 0o600))
	cfg, err := config.Load(path)
	require.NoError(t, err)
	reqs, err := cfg.ScheduleRequests()
	require.NoError(t, err)
	got := reqs["nightly-report"]
	require.Equal(t, "report", got.Workflow)
	require.JSONEq(t, `{"region": "eu", "days": 1}`, string(got.Input))
	require.Equal(t, []string{"0 3 * * *"}, got.Spec.Cron)
	require.Equal(t, "Europe/Berlin", got.Spec.Timezone)
	require.Equal(t, time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC), got.Spec.StartAt.UTC())
	require.Equal(t, "buffer_one", got.Overlap)
	require.True(t, got.PauseOnFailure)
	require.JSONEq(t, `"eu"`, string(got.SearchAttributes["region"]))
}

func TestABadScheduleInTheConfigurationIsRefusedNamingIt(t *testing.T) {
	for body, want := range map[string]string{
		"schedules: {r: {workflow: report, spec: {cron: ['0 3 * * 8']}}}":                        "config: schedules.r.spec.cron[0]",
		"schedules: {r: {workflow: report, spec: {every: 1h, timezone: Nowhere/Land}}}":          "config: schedules.r.spec.timezone",
		"schedules: {r: {workflow: report, spec: {every: 1h}, overlap: never}}":                  "config: schedules.r.overlap",
		"schedules: {'a b': {workflow: report, spec: {every: 1h}}}":                              "config: schedules.a b",
		"schedules: {r: {workflow: report, spec: {every: 1h}, overlapp: skip}}":                  "overlapp",
		"schedules: {r: {workflow: report, spec: {every: 1h}, search_attributes: {region: eu}}}": "config: schedules.r.search_attributes: search attribute region",
	} {
		path := filepath.Join(t.TempDir(), "harvest.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want, body)
	}
}
