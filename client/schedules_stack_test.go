package client_test

import (
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// chargeSchedule is a schedule of charge that fires every second.
func chargeSchedule() client.ScheduleRequest {
	return client.ScheduleRequest{
		Workflow: examples.WorkflowCharge,
		Input:    json.RawMessage(`{"amount_cents": 100, "customer_id": "c"}`),
		Spec:     client.ScheduleSpec{Every: "1s"},
	}
}

// fireNames names each fire by its nominal time and trigger, as the
// ledger keys it.
func fireNames(fires []client.ScheduleFire) []string {
	names := make([]string, 0, len(fires))
	for _, f := range fires {
		names = append(names, f.NominalTime.UTC().Format(time.RFC3339Nano)+" "+f.Trigger)
	}
	return names
}

func TestClientSchedules(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)

	sc, created, err := c.PutSchedule(ctx, "cl-every-second", chargeSchedule())
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "cl-every-second", sc.ScheduleID)
	require.Equal(t, examples.WorkflowCharge, sc.Workflow)
	require.JSONEq(t, `{"amount_cents": 100, "customer_id": "c"}`, string(sc.Input))
	require.Equal(t, "1s", sc.Spec.Every)
	require.Equal(t, client.OverlapSkip, sc.Overlap, "the default")
	require.Equal(t, "api", sc.Source)
	require.False(t, sc.Paused)
	require.Len(t, sc.NextFires, 5)

	// The same definition again replaces it, unchanged.
	again, created, err := c.PutSchedule(ctx, "cl-every-second", chargeSchedule())
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, sc.CreatedAt, again.CreatedAt)

	var started client.ScheduleFire
	probe.Until(t, 30*time.Second, "a fire to start an execution", func() bool {
		page, err := c.ScheduleFires(ctx, "cl-every-second", client.ListFiresOptions{Limit: 500})
		require.NoError(t, err)
		for _, f := range page.Fires {
			if f.Outcome == client.FireStarted {
				started = f
				return true
			}
		}
		return false
	})
	require.Equal(t, client.FireBySpec, started.Trigger)
	require.NotEmpty(t, started.ExecutionID)
	require.Equal(t, "sched:cl-every-second:"+started.NominalTime.UTC().Format(time.RFC3339), started.IdempotencyKey)
	exec, err := c.Describe(ctx, started.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, started.WorkflowID, exec.WorkflowID)

	paused, err := c.PauseSchedule(ctx, "cl-every-second", "maintenance")
	require.NoError(t, err)
	require.Equal(t, &client.ScheduleActionResponse{ScheduleID: "cl-every-second", Action: "paused"}, paused)
	sc, err = c.GetSchedule(ctx, "cl-every-second")
	require.NoError(t, err)
	require.True(t, sc.Paused)
	require.Equal(t, "maintenance", sc.Note)
	require.NotNil(t, sc.LastFire)

	// A second schedule, so that the listing has two pages of one.
	_, created, err = c.PutSchedule(ctx, "cl-paused", client.ScheduleRequest{Workflow: examples.WorkflowCharge,
		Input: json.RawMessage(`{"amount_cents": 100, "customer_id": "c"}`), Spec: client.ScheduleSpec{Cron: []string{"@daily"}}, Paused: true})
	require.NoError(t, err)
	require.True(t, created)
	all, err := c.ListSchedules(ctx, client.ListSchedulesOptions{})
	require.NoError(t, err)
	require.Len(t, all.Schedules, 2)
	require.Empty(t, all.NextCursor)
	first, err := c.ListSchedules(ctx, client.ListSchedulesOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, first.Schedules, 1)
	require.Equal(t, "cl-every-second", first.Schedules[0].ScheduleID, "by id")
	require.True(t, first.Schedules[0].Paused)
	require.NotEmpty(t, first.NextCursor)
	second, err := c.ListSchedules(ctx, client.ListSchedulesOptions{Limit: 1, Cursor: first.NextCursor})
	require.NoError(t, err)
	require.Len(t, second.Schedules, 1)
	require.Equal(t, "cl-paused", second.Schedules[0].ScheduleID)
	require.Empty(t, second.NextCursor)

	// The ledger a fire at a time, newest first, by the cursor.
	fires, err := c.ScheduleFires(ctx, "cl-every-second", client.ListFiresOptions{Limit: 500})
	require.NoError(t, err)
	require.GreaterOrEqual(t, len(fires.Fires), 1)
	var paged []client.ScheduleFire
	for cursor := ""; ; {
		page, err := c.ScheduleFires(ctx, "cl-every-second", client.ListFiresOptions{Limit: 1, Cursor: cursor})
		require.NoError(t, err)
		require.LessOrEqual(t, len(page.Fires), 1)
		paged = append(paged, page.Fires...)
		if page.NextCursor == "" {
			break
		}
		cursor = page.NextCursor
		require.Less(t, len(paged), 1000, "the cursor moves on")
	}
	// Fires recorded paused may have joined the ledger between the two
	// reads: the earlier read is the tail of the paged one.
	// (Their executions' statuses may have changed meanwhile: the fires
	// are compared by what names them.)
	require.GreaterOrEqual(t, len(paged), len(fires.Fires))
	require.Equal(t, fireNames(fires.Fires), fireNames(paged[len(paged)-len(fires.Fires):]))
	for i := 1; i < len(paged); i++ {
		require.False(t, paged[i].NominalTime.After(paged[i-1].NominalTime), "newest first")
	}

	unpaused, err := c.UnpauseSchedule(ctx, "cl-paused", "")
	require.NoError(t, err)
	require.Equal(t, "unpaused", unpaused.Action)
	triggered, err := c.TriggerSchedule(ctx, "cl-paused")
	require.NoError(t, err)
	require.Equal(t, "triggered", triggered.Action)
	require.Len(t, triggered.Fires, 1)
	_, err = c.BackfillSchedule(ctx, "cl-paused", client.ScheduleBackfillRequest{Start: time.Now(), End: time.Now().Add(-time.Hour)})
	stacktest.RequireAPIError(t, err, 400, client.CodeInvalidBackfill)
	day := time.Date(2024, 3, 1, 0, 0, 0, 0, time.UTC)
	backfilled, err := c.BackfillSchedule(ctx, "cl-paused", client.ScheduleBackfillRequest{Start: day, End: day.Add(48 * time.Hour)})
	require.NoError(t, err)
	require.Equal(t, "backfilled", backfilled.Action)
	require.Len(t, backfilled.Fires, 3)
	require.True(t, day.Equal(backfilled.Fires[0]))

	// Refusals are APIErrors naming the field.
	bad := chargeSchedule()
	bad.Spec = client.ScheduleSpec{Cron: []string{"0 25 * * *"}}
	_, _, err = c.PutSchedule(ctx, "cl-bad", bad)
	apiErr := stacktest.RequireAPIError(t, err, 400, client.CodeInvalidScheduleSpec)
	require.Equal(t, "spec.cron[0]", apiErr.Field)
	bad.Spec = client.ScheduleSpec{Every: "1m", Timezone: "Mars/Olympus"}
	_, _, err = c.PutSchedule(ctx, "cl-bad", bad)
	stacktest.RequireAPIError(t, err, 400, client.CodeInvalidTimezone)
	_, _, err = c.PutSchedule(ctx, "no spaces", chargeSchedule())
	stacktest.RequireAPIError(t, err, 400, client.CodeInvalidScheduleID)
	_, err = c.GetSchedule(ctx, "")
	require.ErrorContains(t, err, "schedule id is required")

	deleted, err := c.DeleteSchedule(ctx, "cl-every-second")
	require.NoError(t, err)
	require.Equal(t, &client.ScheduleActionResponse{ScheduleID: "cl-every-second", Action: "deleted"}, deleted)
	_, err = c.GetSchedule(ctx, "cl-every-second")
	var gone *client.APIError
	require.ErrorAs(t, err, &gone)
	require.Equal(t, 404, gone.StatusCode)
	require.Equal(t, client.CodeScheduleNotFound, gone.Code)
	require.ErrorIs(t, err, client.ErrScheduleNotFound)
	require.ErrorIs(t, err, client.ErrNotFound)
	for _, call := range []func() error{
		func() error { _, err := c.ScheduleFires(ctx, "cl-every-second", client.ListFiresOptions{}); return err },
		func() error { _, err := c.PauseSchedule(ctx, "cl-every-second", ""); return err },
		func() error { _, err := c.DeleteSchedule(ctx, "cl-every-second"); return err },
	} {
		err := call()
		stacktest.RequireAPIError(t, err, 404, client.CodeScheduleNotFound)
		require.True(t, errors.Is(err, client.ErrScheduleNotFound))
	}
}

// TestClientSchedulesWhenOutcomesComeLate: when the API answers 202 (the
// scheduler's outcome was late), the schedule's methods poll the command
// and answer as they would have at once.
func TestClientSchedulesWhenOutcomesComeLate(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{OutcomeWait: time.Nanosecond}})
	c, ctx := stacktest.Client(t, s)
	raw := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/cl-late-probe", nil, `{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1h"}}`)
	require.Equal(t, 202, raw.Status, "the stack answers late: %v", raw.Body)

	req := chargeSchedule()
	req.Spec.Every = "1h"
	sc, created, err := c.PutSchedule(ctx, "cl-late", req)
	require.NoError(t, err)
	require.True(t, created)
	require.Equal(t, "cl-late", sc.ScheduleID)
	require.Equal(t, "1h", sc.Spec.Every)
	req.Spec.Every = "2h"
	sc, created, err = c.PutSchedule(ctx, "cl-late", req)
	require.NoError(t, err)
	require.False(t, created)
	require.Equal(t, "2h", sc.Spec.Every, "the replaced definition, read once applied")

	paused, err := c.PauseSchedule(ctx, "cl-late", "late")
	require.NoError(t, err)
	require.Equal(t, &client.ScheduleActionResponse{ScheduleID: "cl-late", Action: "paused"}, paused)
	sc, err = c.GetSchedule(ctx, "cl-late")
	require.NoError(t, err)
	require.True(t, sc.Paused)
	triggered, err := c.TriggerSchedule(ctx, "cl-late")
	require.NoError(t, err)
	require.Equal(t, "triggered", triggered.Action)
	deleted, err := c.DeleteSchedule(ctx, "cl-late")
	require.NoError(t, err)
	require.Equal(t, "deleted", deleted.Action)
	_, err = c.GetSchedule(ctx, "cl-late")
	require.ErrorIs(t, err, client.ErrScheduleNotFound)
}
