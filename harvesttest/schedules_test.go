package harvesttest_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// registerScheduled registers what the schedule tests start: "tick",
// which returns at once, "nap", which sleeps its input's milliseconds,
// and "flaky", which fails.
func registerScheduled(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "tick", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		return "tock", nil
	})
	harvest.RegisterWorkflow(w, "nap", func(ctx *harvest.WorkflowContext, ms int) (string, error) {
		if err := harvest.Sleep(ctx, time.Duration(ms)*time.Millisecond); err != nil {
			return "woken", err
		}
		return "rested", nil
	})
	harvest.RegisterWorkflow(w, "flaky", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		return "", harvest.NewNonRetryableError("Broken", "it always fails")
	})
}

func scheduleEnv(t *testing.T, now time.Time) (*harvesttest.Env, context.Context) {
	t.Helper()
	env, err := harvesttest.New(registerScheduled, harvesttest.Config{Now: now})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	return env, t.Context()
}

// started is the nominal times of the schedule's fires that started an
// execution, oldest first, each checked to have completed.
func started(t *testing.T, env *harvesttest.Env, id string) []time.Time {
	t.Helper()
	fires, err := env.ScheduleFires(id)
	require.NoError(t, err)
	var out []time.Time
	for i := len(fires) - 1; i >= 0; i-- {
		f := fires[i]
		if f.Outcome != api.FireStarted {
			continue
		}
		require.NotEmpty(t, f.ExecutionID)
		status, err := env.Execution(f.ExecutionID).Status()
		require.NoError(t, err)
		require.Equal(t, client.StatusCompleted, status, "the execution of %s", f.NominalTime)
		out = append(out, f.NominalTime)
	}
	return out
}

func utc(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t.UTC()
}

func TestDaylightSavingTransitionsGiveTheStatedFires(t *testing.T) {
	for _, tc := range []struct {
		name, zone, cron, repeated string
		from                       time.Time
		days                       int
		want                       []time.Time
	}{
		{
			// 2026-03-29: 02:00 CET becomes 03:00 CEST; 02:30 does not
			// exist and fires once, at 03:00 CEST.
			name: "Berlin spring forward", zone: "Europe/Berlin", cron: "30 2 * * *", from: utc("2026-03-28T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-03-28T01:30:00Z"), utc("2026-03-29T01:00:00Z"), utc("2026-03-30T00:30:00Z")},
		},
		{
			// 2026-10-25: 03:00 CEST becomes 02:00 CET; 02:30 occurs
			// twice and fires once, at the first.
			name: "Berlin fall back", zone: "Europe/Berlin", cron: "30 2 * * *", from: utc("2026-10-24T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-10-24T00:30:00Z"), utc("2026-10-25T00:30:00Z"), utc("2026-10-26T01:30:00Z")},
		},
		{
			name: "Berlin fall back, both", zone: "Europe/Berlin", cron: "30 2 * * *", repeated: api.RepeatedTimeBoth, from: utc("2026-10-24T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-10-24T00:30:00Z"), utc("2026-10-25T00:30:00Z"), utc("2026-10-25T01:30:00Z"), utc("2026-10-26T01:30:00Z")},
		},
		{
			// 2026-03-08: 02:00 EST becomes 03:00 EDT.
			name: "New York spring forward", zone: "America/New_York", cron: "30 2 * * *", from: utc("2026-03-07T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-03-07T07:30:00Z"), utc("2026-03-08T07:00:00Z"), utc("2026-03-09T06:30:00Z")},
		},
		{
			// 2026-11-01: 02:00 EDT becomes 01:00 EST; 01:30 occurs twice.
			name: "New York fall back", zone: "America/New_York", cron: "30 1 * * *", from: utc("2026-10-31T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-10-31T05:30:00Z"), utc("2026-11-01T05:30:00Z"), utc("2026-11-02T06:30:00Z")},
		},
		{
			name: "New York fall back, both", zone: "America/New_York", cron: "30 1 * * *", repeated: api.RepeatedTimeBoth, from: utc("2026-10-31T00:00:00Z"), days: 3,
			want: []time.Time{utc("2026-10-31T05:30:00Z"), utc("2026-11-01T05:30:00Z"), utc("2026-11-01T06:30:00Z"), utc("2026-11-02T06:30:00Z")},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			env, ctx := scheduleEnv(t, tc.from)
			sc, err := env.PutSchedule(ctx, "nightly", api.ScheduleRequest{Workflow: "tick",
				Spec: api.ScheduleSpec{Cron: []string{tc.cron}, Timezone: tc.zone, RepeatedTime: tc.repeated}})
			require.NoError(t, err)
			require.Equal(t, tc.want[0], sc.NextFires[0].NominalTime)
			require.NoError(t, env.Advance(ctx, time.Duration(tc.days)*24*time.Hour))
			require.Equal(t, tc.want, started(t, env, "nightly"))
		})
	}
}

// outcomes is the schedule's ledger's outcomes, oldest first.
func outcomes(t *testing.T, env *harvesttest.Env, id string) []string {
	t.Helper()
	fires, err := env.ScheduleFires(id)
	require.NoError(t, err)
	var out []string
	for i := len(fires) - 1; i >= 0; i-- {
		out = append(out, fires[i].Outcome)
	}
	return out
}

func TestOverlapPolicies(t *testing.T) {
	// Each fire's execution naps 150 s; the schedule fires every minute,
	// from 00:01 to 00:06.
	for _, tc := range []struct {
		overlap string
		want    []string
	}{
		// 00:01 starts (runs to 03:31); 02 and 03 are skipped; 04 starts
		// (to 06:30); 05 and 06 are skipped.
		{api.OverlapSkip, []string{"started", "skipped_overlap", "skipped_overlap", "started", "skipped_overlap", "skipped_overlap"}},
		// 02 waits, 03 is skipped; 02 starts as 01 closes at 03:31 (to
		// 06:01), 04 waits, 05 and 06 are skipped; 04 starts at 06:01.
		{api.OverlapBufferOne, []string{"started", "started", "skipped_overlap", "started", "skipped_overlap", "skipped_overlap"}},
		// Every fire waits its turn.
		{api.OverlapBufferAll, []string{"started", "started", "started", "buffered", "buffered", "buffered"}},
		{api.OverlapAllowAll, []string{"started", "started", "started", "started", "started", "started"}},
		// Each fire stops the one running, and starts once it closed.
		{api.OverlapTerminateOther, []string{"started", "started", "started", "started", "started", "started"}},
		{api.OverlapCancelOther, []string{"started", "started", "started", "started", "started", "started"}},
	} {
		t.Run(tc.overlap, func(t *testing.T) {
			env, ctx := scheduleEnv(t, utc("2026-01-01T00:00:00Z"))
			end := utc("2026-01-01T00:06:00Z")
			_, err := env.PutSchedule(ctx, "every-minute", api.ScheduleRequest{Workflow: "nap", Input: []byte(`150000`),
				Spec: api.ScheduleSpec{Every: "1m", EndAt: &end}, Overlap: tc.overlap})
			require.NoError(t, err)
			require.NoError(t, env.Advance(ctx, 6*time.Minute+30*time.Second))
			require.Equal(t, tc.want, outcomes(t, env, "every-minute"))
			fires, err := env.ScheduleFires("every-minute")
			require.NoError(t, err)
			var closed []string
			for i := len(fires) - 1; i >= 0; i-- {
				if fires[i].ExecutionStatus != "" {
					closed = append(closed, fires[i].ExecutionStatus)
				}
			}
			switch tc.overlap {
			case api.OverlapTerminateOther:
				require.Equal(t, []string{"Terminated", "Terminated", "Terminated", "Terminated", "Terminated"}, closed)
			case api.OverlapCancelOther:
				// nap returns at once when asked to cancel.
				require.Equal(t, []string{"Cancelled", "Cancelled", "Cancelled", "Cancelled", "Cancelled"}, closed)
			}
		})
	}
}

func TestAScheduleThatPausesOnFailurePausesWhenAnExecutionFails(t *testing.T) {
	env, ctx := scheduleEnv(t, utc("2026-01-01T00:00:00Z"))
	_, err := env.PutSchedule(ctx, "fragile", api.ScheduleRequest{Workflow: "flaky", Spec: api.ScheduleSpec{Every: "1m"}, PauseOnFailure: true})
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, 3*time.Minute))
	require.Equal(t, []string{"started", "paused", "paused"}, outcomes(t, env, "fragile"))
	sc, err := env.Schedule("fragile")
	require.NoError(t, err)
	require.True(t, sc.Paused)
	require.Contains(t, sc.Note, "paused on failure")
	fires, err := env.ScheduleFires("fragile")
	require.NoError(t, err)
	require.Equal(t, "Failed", fires[len(fires)-1].ExecutionStatus)
}

func TestABackfillOverFiredTimesStartsNothingTwice(t *testing.T) {
	env, ctx := scheduleEnv(t, utc("2026-01-01T00:00:00Z"))
	_, err := env.PutSchedule(ctx, "hourly", api.ScheduleRequest{Workflow: "tick", Spec: api.ScheduleSpec{Cron: []string{"@hourly"}}})
	require.NoError(t, err)
	require.NoError(t, env.Advance(ctx, 3*time.Hour))
	require.Len(t, started(t, env, "hourly"), 3)
	// 22:00 and 23:00 of the day before never fired; 01:00 to 03:00 did.
	// Under the schedule's policy (skip), the first new one would keep
	// the others from starting: the backfill allows them all.
	require.NoError(t, env.BackfillSchedule(ctx, "hourly", utc("2025-12-31T22:00:00Z"), utc("2026-01-01T03:00:00Z"), api.OverlapAllowAll))
	fires, err := env.ScheduleFires("hourly")
	require.NoError(t, err)
	byOutcome := map[string]int{}
	for _, f := range fires {
		if f.Trigger == api.FireByBackfill {
			byOutcome[f.Outcome]++
		}
	}
	// 00:00 is a new time too: the schedule was created at it.
	require.Equal(t, map[string]int{"started": 3, "deduplicated": 3}, byOutcome)

	// A trigger fires now, whatever the spec says.
	require.NoError(t, env.Advance(ctx, 10*time.Minute))
	require.NoError(t, env.TriggerSchedule(ctx, "hourly"))
	sc, err := env.Schedule("hourly")
	require.NoError(t, err)
	require.Equal(t, api.FireByTrigger, sc.LastFire.Trigger)
	require.Equal(t, api.FireStarted, sc.LastFire.Outcome)

	require.NoError(t, env.DeleteSchedule(ctx, "hourly"))
	_, err = env.Schedule("hourly")
	var apiErr *client.APIError
	require.True(t, errors.As(err, &apiErr))
	require.Equal(t, api.CodeScheduleNotFound, apiErr.Code)
}

func TestBadSchedulesAreRefusedInTheKit(t *testing.T) {
	env, ctx := scheduleEnv(t, utc("2026-01-01T00:00:00Z"))
	for _, tc := range []struct {
		req   api.ScheduleRequest
		code  string
		field string
	}{
		{api.ScheduleRequest{Workflow: "tick", Spec: api.ScheduleSpec{Cron: []string{"61 * * * *"}}}, api.CodeInvalidScheduleSpec, "spec.cron[0]"},
		{api.ScheduleRequest{Workflow: "tick", Spec: api.ScheduleSpec{Every: "1h", Timezone: "Europe/Atlantis"}}, api.CodeInvalidTimezone, "spec.timezone"},
		{api.ScheduleRequest{Workflow: "nope", Spec: api.ScheduleSpec{Every: "1h"}}, api.CodeUnknownWorkflow, "workflow"},
	} {
		_, err := env.PutSchedule(ctx, "bad", tc.req)
		var apiErr *client.APIError
		require.True(t, errors.As(err, &apiErr), "%v", err)
		require.Equal(t, tc.code, apiErr.Code)
		require.Equal(t, tc.field, apiErr.Field)
	}
}
