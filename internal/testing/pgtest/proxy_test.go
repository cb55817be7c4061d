package pgtest_test

import (
	"context"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// TestProxyLosesTheAnswerToACommittedStatement: a statement the proxy is
// told to lose the answer of runs and commits, and its client gets an
// error instead of the answer; prepared (extended protocol, a first run
// and a cached one) and simple queries alike, and only while told.
func TestProxyLosesTheAnswerToACommittedStatement(t *testing.T) {
	t.Parallel()
	dsn := pgtest.NewDatabase(t)
	ctx := context.Background()
	direct, err := pgxpool.New(ctx, dsn)
	require.NoError(t, err)
	t.Cleanup(direct.Close)
	_, err = direct.Exec(ctx, `CREATE TABLE marks (n int)`)
	require.NoError(t, err)
	proxy := pgtest.NewProxy(t, dsn)
	via, err := pgxpool.New(ctx, proxy.URL())
	require.NoError(t, err)
	t.Cleanup(via.Close)
	rows := func() int {
		var n int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM marks`).Scan(&n))
		return n
	}

	_, err = via.Exec(ctx, `INSERT INTO marks VALUES ($1)`, 1)
	require.NoError(t, err, "answered while nothing is to be lost")
	proxy.LoseAnswers(func(sql string) bool { return strings.HasPrefix(sql, "INSERT INTO marks") })
	for i, mode := range []pgx.QueryExecMode{pgx.QueryExecModeCacheStatement, pgx.QueryExecModeCacheStatement, pgx.QueryExecModeSimpleProtocol} {
		_, err = via.Exec(ctx, `INSERT INTO marks VALUES ($1)`, mode, 2+i)
		require.Error(t, err, "run %d (%s): the answer is lost", i, mode)
		require.Equal(t, 2+i, rows(), "run %d (%s): the statement committed", i, mode)
	}
	require.Len(t, proxy.Lost(), 3)
	_, err = via.Exec(ctx, `SELECT 1`)
	require.NoError(t, err, "what does not match is answered")
	proxy.LoseAnswers(nil)
	_, err = via.Exec(ctx, `INSERT INTO marks VALUES ($1)`, 9)
	require.NoError(t, err)
	require.Equal(t, 5, rows())
}
