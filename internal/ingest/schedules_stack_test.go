package ingest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestTheConfigurationsSchedulesAreReconciledAtStartUp(t *testing.T) {
	t.Parallel()
	nightly := api.ScheduleRequest{Workflow: "charge", Input: []byte(`{"amount_cents": 1, "customer_id": "c"}`),
		Spec: api.ScheduleSpec{Cron: []string{"0 3 * * *"}, Timezone: "Europe/Berlin"}}
	hourly := api.ScheduleRequest{Workflow: "charge", Input: []byte(`{"amount_cents": 2, "customer_id": "c"}`), Spec: api.ScheduleSpec{Cron: []string{"@hourly"}}}
	natsURL, dbURL := natstest.RunServer(t, natstest.Options{}).ClientURL(), pgtest.NewDatabase(t)
	s := stacktest.Start(t, devstack.Config{NATSURL: natsURL, DatabaseURL: dbURL,
		Ingest: ingest.Config{Schedules: map[string]api.ScheduleRequest{"nightly-report": nightly, "hourly-sync": hourly}}})
	var got stacktest.Answer
	probe.Until(t, 30*time.Second, "the declared schedules to exist", func() bool {
		got = stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules", nil, "")
		return got.Status == 200 && len(got.Body["schedules"].([]any)) == 2
	})
	one := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/nightly-report", nil, "")
	require.Equal(t, "config", one.Body["source"])
	require.Equal(t, "skip", one.Body["overlap"])
	require.Len(t, one.Body["next_fires"], 5)

	// An operator's pause stands when the configuration is applied again
	// at the next start-up; a schedule it no longer declares goes.
	require.Equal(t, 200, stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/nightly-report/pause", nil, `{"note": "quarter close"}`).Status)
	stacktest.Stop(t, s)
	s = stacktest.Start(t, devstack.Config{NATSURL: natsURL, DatabaseURL: dbURL,
		Ingest: ingest.Config{Schedules: map[string]api.ScheduleRequest{"nightly-report": nightly}}})
	probe.Until(t, 30*time.Second, "the schedule no longer declared to go", func() bool {
		return stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/hourly-sync", nil, "").Status == 404
	})
	one = stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/nightly-report", nil, "")
	require.Equal(t, true, one.Body["paused"])
	require.Equal(t, "quarter close", one.Body["note"])
}

func TestATokenLimitedToSomeWorkflowsSeesAndChangesOnlyTheirSchedules(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "billing", SHA256: auth.Hash("t-billing"), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeRead}, Workflows: []string{"charge"}},
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeRead}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	as := func(token string) map[string]string { return map[string]string{"Authorization": "Bearer " + token} }
	tally := `{"workflow": "tally", "input": {"every": 100}, "spec": {"every": "1h"}}`
	require.Equal(t, 201, stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/ops-tally", as("t-ops"), tally).Status)
	require.Equal(t, 201, stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/billing-charge", as("t-billing"),
		`{"workflow": "charge", "input": {"amount_cents": 1, "customer_id": "c"}, "spec": {"every": "1h"}}`).Status)

	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/ops-tally", as("t-billing"), "").Status)
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/ops-tally/fires", as("t-billing"), "").Status)
	require.Equal(t, 404, stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/ops-tally/pause", as("t-billing"), "").Status)
	require.Equal(t, 404, stacktest.Call(t, "DELETE", s.URL()+"/api/harvest/schedules/ops-tally", as("t-billing"), "").Status)
	// Replacing another workflow's schedule under an id it cannot see.
	taken := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/ops-tally", as("t-billing"),
		`{"workflow": "charge", "input": {"amount_cents": 1, "customer_id": "c"}, "spec": {"every": "1h"}}`)
	require.Equal(t, 403, taken.Status, taken.Body)
	// Nor a schedule of a workflow it may not start.
	require.Equal(t, 403, stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/mine", as("t-billing"), tally).Status)

	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules", as("t-billing"), "")
	require.Len(t, list.Body["schedules"], 1)
	require.Equal(t, "billing-charge", list.Body["schedules"].([]any)[0].(map[string]any)["schedule_id"])
	got := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/ops-tally", as("t-ops"), "")
	require.Equal(t, "tally", got.Body["workflow"], "untouched")
}
