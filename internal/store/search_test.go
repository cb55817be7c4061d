package store_test

import (
	"context"
	"flag"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// searchExecutions is how many executions TestSearchFiltersOverManyExecutions
// makes; docs/benchmarks.md gives its figures at 1,000,000
// (-search.executions 1000000).
var searchExecutions = flag.Int("search.executions", 20000, "executions the search attribute filter test indexes")

// TestSearchFiltersOverManyExecutions fills a store with executions,
// each with three search attributes (a customer among 10,000, an amount
// from 0 to 99,999, a region among five), and checks what each kind of
// filter finds: a keyword a few executions have, a narrow range, a
// keyword a fifth have, and their counts. It logs how long each takes
// (the median of five), which docs/benchmarks.md reports for a million
// executions; it asserts only what they find.
func TestSearchFiltersOverManyExecutions(t *testing.T) {
	n := *searchExecutions
	db := pgtest.NewPool(t)
	ctx := context.Background()
	began := time.Now()
	_, err := db.Exec(ctx, `
		INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, created_at, updated_at)
		SELECT gen_random_uuid(), i % 8, 'order', 'order-' || i, 'default', 'Completed',
			timestamptz '2026-12-01 00:00:00Z' + i * interval '1 second', timestamptz '2026-12-01 00:00:00Z' + i * interval '1 second'
		FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `
		INSERT INTO search_attributes (execution_id, name, keyword, num)
		SELECT execution_id, a.name,
			CASE a.name WHEN 'customer_id' THEN 'c_' || (i % 10000) WHEN 'region' THEN (ARRAY['eu','us','ap','sa','af'])[1 + i % 5] END,
			CASE a.name WHEN 'amount' THEN ((i * 7919) % 100000)::float8 END
		FROM (SELECT execution_id, row_number() OVER (ORDER BY created_at) AS i FROM executions) AS e
		CROSS JOIN (VALUES ('customer_id'), ('amount'), ('region')) AS a(name)`)
	require.NoError(t, err)
	_, err = db.Exec(ctx, `ANALYZE executions; ANALYZE search_attributes`)
	require.NoError(t, err)
	t.Logf("%d executions, %d search attribute rows, made in %s", n, 3*n, time.Since(began).Round(time.Millisecond))

	schema := searchattr.Schema{"order": {"customer_id": "keyword", "amount": "int", "region": "keyword"}}
	cond := func(key, value string) searchattr.Condition {
		c, err := schema.ParseCondition("order", key, value)
		require.NoError(t, err)
		return c
	}
	median := func(f func()) time.Duration {
		var took []time.Duration
		for range 5 {
			at := time.Now()
			f()
			took = append(took, time.Since(at))
		}
		slices.Sort(took)
		return took[2]
	}
	perCustomer := (n + 9999) / 10000
	for _, q := range []struct {
		what  string
		conds []searchattr.Condition
		count int64 // -1: not checked exactly
	}{
		{"a customer (1 in 10,000)", []searchattr.Condition{cond("attr.customer_id", "c_42")}, int64(perCustomer)},
		{"an amount range (0.1%)", []searchattr.Condition{cond("attr.amount.gte", "99900")}, -1},
		{"a region (1 in 5)", []searchattr.Condition{cond("attr.region", "eu")}, int64(n / 5)},
		{"a region and an amount range", []searchattr.Condition{cond("attr.region", "eu"), cond("attr.amount.lt", "1000")}, -1},
	} {
		f := store.ListFilter{WorkflowName: "order", Search: q.conds, Limit: 50}
		var page []*store.Execution
		listTook := median(func() {
			page, err = store.ListExecutions(ctx, db, f)
			require.NoError(t, err)
		})
		var count int64
		countTook := median(func() {
			count, err = store.CountExecutions(ctx, db, f)
			require.NoError(t, err)
		})
		require.Equal(t, min(count, 50), int64(len(page)), q.what)
		if q.count >= 0 {
			require.Equal(t, q.count, count, q.what)
		}
		require.Positive(t, count, q.what)
		for i := 1; i < len(page); i++ {
			require.False(t, page[i].CreatedAt.After(page[i-1].CreatedAt), "newest first")
		}
		t.Logf("%s: list of 50 in %s, count of %d in %s", q.what, listTook.Round(10*time.Microsecond), count, countTook.Round(10*time.Microsecond))
	}
}
