package store_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/pgtest"
	"github.com/harvest-engine/harvest/store"
)

func TestPoolConfigPlansEveryCallForItsParameters(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	show := func(url string) string {
		t.Helper()
		cfg, err := store.PoolConfig(url)
		require.NoError(t, err)
		db, err := pgxpool.NewWithConfig(ctx, cfg)
		require.NoError(t, err)
		defer db.Close()
		var mode string
		require.NoError(t, db.QueryRow(ctx, "SHOW plan_cache_mode").Scan(&mode))
		return mode
	}
	require.Equal(t, "force_custom_plan", show(url))
	// A URL that chooses for itself is obeyed.
	sep := "?"
	if strings.Contains(url, "?") {
		sep = "&"
	}
	require.Equal(t, "auto", show(url+sep+"plan_cache_mode=auto"))

	_, err := store.PoolConfig("postgres://a b")
	require.Error(t, err)
}
