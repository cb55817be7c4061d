package store_test

import (
	"context"
	"crypto/x509"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/certtest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
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
	require.Equal(t, "auto", show(withParams(url, "plan_cache_mode=auto")))

	_, err := store.PoolConfig("postgres://a b")
	require.Error(t, err)
}

// TestPoolPlansForTheTableAsItIsNow is the reason for PoolConfig: a
// statement first run while its table was empty must not keep scanning it
// whole once it has grown. (With PostgreSQL's default plan_cache_mode, the
// generic plan cached while the table was known to be empty is a
// sequential scan, kept until the table is next analyzed: the second
// assertion.)
func TestPoolPlansForTheTableAsItIsNow(t *testing.T) {
	ctx := context.Background()
	url := pgtest.NewDatabase(t)
	seqScans := func(params string) int {
		t.Helper()
		db, err := store.NewPool(ctx, withParams(url, "pool_max_conns=1"+params))
		require.NoError(t, err)
		defer db.Close()
		_, err = db.Exec(ctx, `DROP TABLE IF EXISTS grows; CREATE TABLE grows (name text, key text, PRIMARY KEY (name, key)) WITH (autovacuum_enabled = false);
			ANALYZE grows`) // known to be empty, as the migrations' CREATE INDEX leaves a table
		require.NoError(t, err)
		// The shape of the apply's reads by a batch's keys.
		const lookup = `SELECT key FROM grows WHERE (name, key) IN (SELECT * FROM unnest($1::text[], $2::text[]))`
		names, keys := []string{"wf"}, []string{"k-1"}
		for range 10 { // past the five custom plans before a generic one
			rows, err := db.Query(ctx, lookup, names, keys)
			require.NoError(t, err)
			rows.Close()
		}
		_, err = db.Exec(ctx, `INSERT INTO grows SELECT 'wf', 'k-' || i FROM generate_series(1, 20000) AS i`)
		require.NoError(t, err)
		// Counted within one transaction, whose own counts
		// pg_stat_xact_user_tables shows (with whatever this backend has
		// not flushed yet: hence the difference).
		var before, after int
		const scanned = `SELECT seq_scan FROM pg_stat_xact_user_tables WHERE relname = 'grows'`
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			if err := tx.QueryRow(ctx, scanned).Scan(&before); err != nil {
				return err
			}
			for range 3 {
				rows, err := tx.Query(ctx, lookup, names, keys)
				if err != nil {
					return err
				}
				rows.Close()
			}
			return tx.QueryRow(ctx, scanned).Scan(&after)
		}))
		return after - before
	}
	require.Zero(t, seqScans(""), "lookups by key on a grown table use its index")
	require.Positive(t, seqScans("&plan_cache_mode=auto"), "the plan this pool avoids")
}

func TestPoolConfigPassesTheURLsTLSParametersThrough(t *testing.T) {
	ca := certtest.NewCA(t, "pg")
	root := x509.NewCertPool()
	root.AddCert(ca.Cert())
	base := "postgres://harvest@db.example:5432/harvest?sslrootcert=" + url.QueryEscape(ca.CertFile)

	cfg, err := store.PoolConfig(base + "&sslmode=verify-full")
	require.NoError(t, err)
	tc := cfg.ConnConfig.TLSConfig
	require.NotNil(t, tc, "sslmode=verify-full connects with TLS")
	require.False(t, tc.InsecureSkipVerify, "and verifies the server's certificate")
	require.Equal(t, "db.example", tc.ServerName, "and its name")
	require.True(t, root.Equal(tc.RootCAs), "against sslrootcert")
	require.Empty(t, cfg.ConnConfig.Fallbacks, "without falling back to plain text")
	require.Equal(t, "force_custom_plan", cfg.ConnConfig.RuntimeParams["plan_cache_mode"], "beside Harvest's own setting")

	cfg, err = store.PoolConfig(base + "&sslmode=verify-ca")
	require.NoError(t, err)
	tc = cfg.ConnConfig.TLSConfig
	require.NotNil(t, tc)
	require.NotNil(t, tc.VerifyPeerCertificate, "verify-ca checks the chain itself, not the name")
	require.True(t, root.Equal(tc.RootCAs))

	cfg, err = store.PoolConfig("postgres://harvest@db.example:5432/harvest?sslmode=disable")
	require.NoError(t, err)
	require.Nil(t, cfg.ConnConfig.TLSConfig)

	_, err = store.PoolConfig("postgres://harvest@db.example:5432/harvest?sslmode=verify-full&sslrootcert=/nonexistent/ca.pem")
	require.ErrorContains(t, err, "/nonexistent/ca.pem", "a missing sslrootcert is named")
}

func TestPoolMaxConnsCapsThePool(t *testing.T) {
	ctx := context.Background()
	dsn := pgtest.NewDatabase(t)
	cfg, err := store.PoolConfigWith(withParams(dsn, "pool_max_conns=9&pool_min_conns=5"), store.PoolOptions{MaxConns: 3})
	require.NoError(t, err)
	require.EqualValues(t, 3, cfg.MaxConns, "the option wins over the URL")
	require.EqualValues(t, 3, cfg.MinConns, "and lowers the URL's minimum to it")
	cfg, err = store.PoolConfigWith(withParams(dsn, "pool_max_conns=9"), store.PoolOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 9, cfg.MaxConns, "no option keeps the URL's")
	_, err = store.PoolConfigWith(dsn, store.PoolOptions{MaxConns: -1})
	require.Error(t, err)

	db, err := store.NewPoolWith(ctx, dsn, store.PoolOptions{MaxConns: 2})
	require.NoError(t, err)
	defer db.Close()
	require.EqualValues(t, 2, db.Stat().MaxConns())
	// Two connections held: a third acquire waits until one is released.
	held := make([]*pgxpool.Conn, 2)
	for i := range held {
		held[i], err = db.Acquire(ctx)
		require.NoError(t, err)
	}
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	_, err = db.Acquire(short)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	held[0].Release()
	third, err := db.Acquire(ctx)
	require.NoError(t, err)
	third.Release()
	held[1].Release()
	require.EqualValues(t, 2, db.Stat().TotalConns())
}

// withParams adds query parameters to a PostgreSQL URL.
func withParams(url, params string) string {
	if strings.Contains(url, "?") {
		return url + "&" + params
	}
	return url + "?" + params
}
