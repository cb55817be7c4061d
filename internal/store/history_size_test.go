package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// An execution's history size and warning are stored and read back with
// it, inserted and updated (one row, and set-based).
func TestTheHistorySizeIsStored(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	a, b := newExecution(t), newExecution(t)
	a.HistoryBytes = 1234
	write(t, db, &store.Writes{NewExecutions: []*store.Execution{a, b}})
	got, err := store.GetExecution(ctx, db, a.ExecutionID)
	require.NoError(t, err)
	require.EqualValues(t, 1234, got.HistoryBytes)
	require.Nil(t, got.HistoryWarning)

	warning := &api.HistoryWarning{WarnEvents: 10, WarnBytes: 100, MaxEvents: 50, MaxBytes: 500}
	a.HistoryBytes, a.HistoryWarning = 5<<30, warning
	write(t, db, &store.Writes{UpdatedExecutions: []*store.Execution{a}})
	got, err = store.GetExecution(ctx, db, a.ExecutionID)
	require.NoError(t, err)
	require.EqualValues(t, 5<<30, got.HistoryBytes, "a bigint")
	require.Equal(t, warning, got.HistoryWarning)

	// Set-based, as a batch of many updated executions is written.
	var many []*store.Execution
	for range 20 {
		e := newExecution(t)
		many = append(many, e)
	}
	write(t, db, &store.Writes{NewExecutions: many})
	for i, e := range many {
		e.HistoryBytes = int64(i)
		e.HistoryWarning = warning
	}
	write(t, db, &store.Writes{UpdatedExecutions: many})
	for i, e := range many {
		got, err := store.GetExecution(ctx, db, e.ExecutionID)
		require.NoError(t, err)
		require.EqualValues(t, i, got.HistoryBytes)
		require.Equal(t, warning, got.HistoryWarning)
	}
}

// Migration 026 counts the histories of the executions that exist when
// it runs, from their stored events.
func TestTheHistorySizeMigrationCountsExistingHistories(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	ctx := context.Background()
	e, empty := newExecution(t), newExecution(t)
	e.LastSeq = 2
	write(t, db, &store.Writes{NewExecutions: []*store.Execution{e, empty}, Events: []store.EventRow{
		{ExecutionID: e.ExecutionID, Event: wire.Event{Seq: 1, Type: wire.EventWorkflowStarted, At: at(0), Attrs: json.RawMessage(`{"input": {"n": 1}}`)}},
		{ExecutionID: e.ExecutionID, Event: wire.Event{Seq: 2, Type: wire.EventSignalReceived, At: at(0), Attrs: json.RawMessage(`{"signal_name": "s"}`)}},
	}})
	// The schema as migration 025 left it.
	_, err := db.Exec(ctx, `ALTER TABLE executions DROP COLUMN history_bytes, DROP COLUMN history_warning;
		DELETE FROM schema_migrations WHERE version = 26`)
	require.NoError(t, err)
	applied, err := store.Migrate(ctx, db)
	require.NoError(t, err)
	require.Equal(t, []int{26}, applied)

	got, err := store.GetExecution(ctx, db, e.ExecutionID)
	require.NoError(t, err)
	want := len(wire.EventWorkflowStarted) + len(`{"input": {"n": 1}}`) + len(wire.EventSignalReceived) + len(`{"signal_name": "s"}`)
	require.EqualValues(t, want, got.HistoryBytes)
	got, err = store.GetExecution(ctx, db, empty.ExecutionID)
	require.NoError(t, err)
	require.Zero(t, got.HistoryBytes)
}
