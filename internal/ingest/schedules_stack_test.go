package ingest_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
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
