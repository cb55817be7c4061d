package store_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"
)

// TestRowsWorkflowsAddMuchOfCarryNoForeignKeys: each foreign key check
// is a query of its own per row (migrations 009 and 013); only the rare
// completion callbacks keep theirs.
func TestRowsWorkflowsAddMuchOfCarryNoForeignKeys(t *testing.T) {
	t.Parallel()
	db := newDB(t)
	rows, err := db.Query(context.Background(), `
		SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' ORDER BY 1`)
	require.NoError(t, err)
	tables, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	require.Equal(t, []string{"callback_deliveries"}, tables)
}
