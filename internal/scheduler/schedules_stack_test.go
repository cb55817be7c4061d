package scheduler_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// fires reads a schedule's ledger, newest first.
func fires(t *testing.T, s *devstack.Stack, id string) []map[string]any {
	t.Helper()
	a := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/"+id+"/fires?limit=500", nil, "")
	require.Equal(t, 200, a.Status, a.Body)
	var out []map[string]any
	for _, f := range a.Body["fires"].([]any) {
		out = append(out, f.(map[string]any))
	}
	return out
}

func countOutcome(fs []map[string]any, outcome string) int {
	n := 0
	for _, f := range fs {
		if f["outcome"] == outcome {
			n++
		}
	}
	return n
}

func TestASchedulesFiresStartOneExecutionEachAndAreInItsLedger(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	put := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/every-second", nil,
		`{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1s"}, "overlap": "allow_all"}`)
	require.Equal(t, 201, put.Status, put.Body)
	require.Equal(t, "allow_all", put.Body["overlap"])
	require.Equal(t, "1h0m0s", put.Body["catchup_window"])
	require.Len(t, put.Body["next_fires"], 5)

	var fs []map[string]any
	probe.Until(t, 30*time.Second, "three fires to start executions that complete", func() bool {
		fs = fires(t, s, "every-second")
		done := 0
		for _, f := range fs {
			if f["outcome"] == "started" && f["execution_status"] == "Completed" {
				done++
			}
		}
		return done >= 3
	})
	for _, f := range fs {
		if f["outcome"] != "started" || f["execution_id"] == nil {
			continue
		}
		nominal, err := time.Parse(time.RFC3339Nano, f["nominal_time"].(string))
		require.NoError(t, err)
		require.Equal(t, nominal.Truncate(time.Second), nominal, "an every-1s schedule's nominal times are whole seconds")
		require.Equal(t, "sched:every-second:"+nominal.UTC().Format(time.RFC3339), f["idempotency_key"])
		exec := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+f["execution_id"].(string), nil, "")
		require.Equal(t, "every-second-"+nominal.UTC().Format(time.RFC3339), exec.Body["workflow_id"])
		require.Equal(t, f["idempotency_key"], exec.Body["idempotency_key"])
	}

	// Pausing records the times that pass as paused, and starts nothing.
	pause := stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/every-second/pause", nil, `{"note": "maintenance"}`)
	require.Equal(t, 200, pause.Status, pause.Body)
	probe.Until(t, 15*time.Second, "two fires recorded paused", func() bool {
		return countOutcome(fires(t, s, "every-second"), "paused") >= 2
	})
	got := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/every-second", nil, "")
	require.Equal(t, true, got.Body["paused"])
	require.Equal(t, "maintenance", got.Body["note"])

	// A backfill over fired times starts nothing new: each is
	// deduplicated, with the execution its time started.
	fs = fires(t, s, "every-second")
	var first map[string]any
	for _, f := range fs {
		if f["outcome"] == "started" {
			first = f
		}
	}
	require.NotNil(t, first)
	executions := stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'charge'`)
	bf := stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/every-second/backfill", nil,
		`{"start": "`+first["nominal_time"].(string)+`", "end": "`+first["nominal_time"].(string)+`"}`)
	require.Equal(t, 200, bf.Status, bf.Body)
	require.Len(t, bf.Body["fires"], 1)
	var backfilled map[string]any
	for _, f := range fires(t, s, "every-second") {
		if f["trigger"] == "backfill" {
			backfilled = f
		}
	}
	require.NotNil(t, backfilled)
	require.Equal(t, "deduplicated", backfilled["outcome"])
	future := stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/every-second/backfill", nil,
		`{"start": "`+first["nominal_time"].(string)+`", "end": "2999-01-01T00:00:00Z"}`)
	require.Equal(t, 400, future.Status, future.Body)
	require.Equal(t, "invalid_backfill", future.Body["error"])
	require.Equal(t, "end", future.Body["field"])
	require.Equal(t, first["execution_id"], backfilled["execution_id"])

	// A trigger fires now, paused or not.
	tr := stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/every-second/trigger", nil, "")
	require.Equal(t, 200, tr.Status, tr.Body)
	probe.Until(t, 15*time.Second, "the trigger's execution to complete", func() bool {
		for _, f := range fires(t, s, "every-second") {
			if f["trigger"] == "trigger" && f["execution_status"] == "Completed" {
				return true
			}
		}
		return false
	})
	require.Equal(t, executions+1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE workflow_name = 'charge'`))

	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules", nil, "")
	require.Equal(t, 200, list.Status)
	require.Len(t, list.Body["schedules"], 1)

	del := stacktest.Call(t, "DELETE", s.URL()+"/api/harvest/schedules/every-second", nil, "")
	require.Equal(t, 200, del.Status, del.Body)
	gone := stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/every-second", nil, "")
	require.Equal(t, 404, gone.Status)
	require.Equal(t, "schedule_not_found", gone.Body["error"])
}

func TestAScheduleThatSkipsOverlapStartsNoSecondWhileOneRuns(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	// tally waits for signals: its executions run until closed.
	put := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/one-at-a-time", nil,
		`{"workflow": "tally", "input": {"every": 100}, "spec": {"every": "1s"}}`)
	require.Equal(t, 201, put.Status, put.Body)
	probe.Until(t, 20*time.Second, "two fires skipped while the first runs", func() bool {
		return countOutcome(fires(t, s, "one-at-a-time"), "skipped_overlap") >= 2
	})
	fs := fires(t, s, "one-at-a-time")
	require.Equal(t, 1, countOutcome(fs, "started")+countOutcome(fs, "starting"), "%v", fs)
}

func TestBadSchedulesAreRefusedNamingTheField(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	for _, tc := range []struct {
		body, code, field string
		status            int
	}{
		{`{"workflow": "charge", "spec": {"cron": ["0 25 * * *"]}}`, "invalid_schedule_spec", "spec.cron[0]", 400},
		{`{"workflow": "charge", "spec": {"every": "500ms"}}`, "invalid_schedule_spec", "spec.every", 400},
		{`{"workflow": "charge", "spec": {"every": "1m", "jitter": "2m"}}`, "invalid_schedule_spec", "spec.jitter", 400},
		{`{"workflow": "charge", "spec": {"every": "1m", "timezone": "Mars/Olympus"}}`, "invalid_timezone", "spec.timezone", 400},
		{`{"workflow": "charge", "spec": {"every": "1m"}, "overlap": "sometimes"}`, "invalid_schedule_spec", "overlap", 400},
		{`{"workflow": "charge", "spec": {}}`, "invalid_schedule_spec", "spec", 400},
		{`{"workflow": "no_such_workflow", "spec": {"every": "1m"}}`, "unknown_workflow", "workflow", 404},
		{`{"workflow": "charge", "spec": {"every": "1m"}, "workflow_id_template": "x-{when}"}`, "invalid_schedule_spec", "workflow_id_template", 400},
		{`{"workflow": "charge", "spec": {"every": "1m"}, "overlapp": "skip"}`, "unknown_field", "overlapp", 400},
		{`{"workflow": "charge", "spec": {"every": "1m"}, "search_attributes": {"region": "eu"}}`, "invalid_search_attribute", "search_attributes.region", 400},
	} {
		a := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/bad", nil, tc.body)
		require.Equal(t, tc.status, a.Status, "%s: %v", tc.body, a.Body)
		require.Equal(t, tc.code, a.Body["error"], tc.body)
		require.Equal(t, tc.field, a.Body["field"], tc.body)
	}
	require.Equal(t, 0, stacktest.DBCount(t, s, `SELECT count(*) FROM schedules`))
	bad := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/no%20spaces", nil, `{"workflow": "charge", "spec": {"every": "1m"}}`)
	require.Equal(t, 400, bad.Status)
	require.Equal(t, "invalid_schedule_id", bad.Body["error"])
	missing := stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/nope/pause", nil, "")
	require.Equal(t, 404, missing.Status)
	require.Equal(t, "schedule_not_found", missing.Body["error"])
}

func TestAScheduleRowThatCannotBeReadIsSetAsideAndStopsNoOther(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	put := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/steady", nil,
		`{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1s"}, "overlap": "allow_all"}`)
	require.Equal(t, 201, put.Status, put.Body)
	db := s.DB
	var shard int
	require.NoError(t, db.QueryRow(t.Context(), `SELECT shard FROM schedules WHERE schedule_id = 'steady'`).Scan(&shard))
	// A row no version of Harvest writes, due now, on the same shard.
	_, err := db.Exec(t.Context(), `INSERT INTO schedules (schedule_id, shard, definition, source, paused, note, fired_through, next_due,
		running, buffered, created_at, updated_at) VALUES ('broken', $1, '{"workflow": 5}', 'api', false, '', now(), now(), '[]', '[]', now(), now())`, shard)
	require.NoError(t, err)
	probe.Until(t, 30*time.Second, "the broken row set aside", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM schedules WHERE schedule_id = 'broken' AND next_due IS NULL`) == 1
	})
	before := countOutcome(fires(t, s, "steady"), "started")
	probe.Until(t, 30*time.Second, "the other schedule to go on firing", func() bool {
		return countOutcome(fires(t, s, "steady"), "started") >= before+2
	})
	// It can be replaced whole.
	again := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/broken", nil,
		`{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1h"}}`)
	require.Equal(t, 201, again.Status, again.Body)
	require.Equal(t, 200, stacktest.Call(t, "GET", s.URL()+"/api/harvest/schedules/broken", nil, "").Status)
}

// TestAScheduleSetsItsFiresSearchAttributes: a schedule's
// search_attributes are each fire's execution's, and its GET shows them.
func TestAScheduleSetsItsFiresSearchAttributes(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{"charge": {"customer_id": "keyword"}}
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{SearchAttributes: schema}, Scheduler: scheduler.Config{SearchAttributes: schema}})
	put := stacktest.Call(t, "PUT", s.URL()+"/api/harvest/schedules/tagged", nil,
		`{"workflow": "charge", `+stacktest.ChargeInput+`, "spec": {"every": "1h"}, "search_attributes": {"customer_id": "cus_sched"}}`)
	require.Equal(t, 201, put.Status, put.Body)
	require.Equal(t, map[string]any{"customer_id": "cus_sched"}, put.Body["search_attributes"])
	require.Equal(t, 200, stacktest.Call(t, "POST", s.URL()+"/api/harvest/schedules/tagged/trigger", nil, "").Status)
	var id string
	probe.Until(t, 30*time.Second, "the trigger's execution", func() bool {
		for _, f := range fires(t, s, "tagged") {
			if f["outcome"] == "started" {
				id, _ = f["execution_id"].(string)
			}
		}
		return id != ""
	})
	e := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
	require.Equal(t, map[string]any{"customer_id": "cus_sched"}, e.Body["search_attributes"])
	n := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/count?attr.customer_id=cus_sched", nil, "")
	require.Equal(t, float64(1), n.Body["count"], n.Body)
}
