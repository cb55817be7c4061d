package ingest_test

import (
	"encoding/json"
	"net/http"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestListFiltersByPrefixAndTimeAndPagesByCursor: GET
// /api/harvest/executions finds executions by a prefix of their key (LIKE's
// wildcards taken literally) or of their workflow_id and by a time range,
// and its cursor pages stay exact while new executions arrive.
func TestListFiltersByPrefixAndTimeAndPagesByCursor(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	in := examples.ChargeInput{AmountCents: 500, CustomerID: "cus_1"}

	start := func(key, workflowID string) *client.Execution {
		t.Helper()
		res, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{IdempotencyKey: key, WorkflowID: workflowID})
		require.NoError(t, err)
		e, err := c.Describe(ctx, res.ExecutionID)
		require.NoError(t, err)
		require.Equal(t, key, e.IdempotencyKey, "describe shows the start's key")
		return e
	}
	var page []*client.Execution
	for _, key := range []string{"lp-a-1", "lp-a-2", "lp-a-3", "lp-a-4", "lp-a-5"} {
		page = append(page, start(key, ""))
	}
	literal := start("lp_%x", "wid-lp-1")
	ids := func(es []client.Execution) []string {
		out := make([]string, len(es))
		for i, e := range es {
			out[i] = e.ExecutionID
		}
		return out
	}

	// LIKE's wildcards in a prefix are literal: "lp_%" is not "lp" + any.
	got, err := c.List(ctx, client.ListOptions{KeyPrefix: "lp_%"})
	require.NoError(t, err)
	require.Equal(t, []string{literal.ExecutionID}, ids(got))
	got, err = c.List(ctx, client.ListOptions{WorkflowIDPrefix: "wid-lp"})
	require.NoError(t, err)
	require.Equal(t, []string{literal.ExecutionID}, ids(got))

	// Pages of two, newest first; an execution started between pages
	// comes before the first page, so the walk neither repeats nor skips.
	want := make([]string, 0, len(page))
	for _, e := range slices.Backward(page) {
		want = append(want, e.ExecutionID)
	}
	var walked []string
	opts := client.ListOptions{KeyPrefix: "lp-a-", Limit: 2}
	for i := 0; ; i++ {
		p, err := c.ListPage(ctx, opts)
		require.NoError(t, err)
		walked = append(walked, ids(p.Executions)...)
		if i == 0 {
			start("lp-a-6", "")
		}
		if p.NextCursor == "" {
			break
		}
		require.Len(t, p.Executions, 2)
		opts.Cursor = p.NextCursor
	}
	require.Equal(t, want, walked)

	// A time range: from the third start on, before the fifth.
	got, err = c.List(ctx, client.ListOptions{KeyPrefix: "lp-a-", CreatedAfter: page[2].CreatedAt, CreatedBefore: page[4].CreatedAt})
	require.NoError(t, err)
	require.Equal(t, []string{page[3].ExecutionID, page[2].ExecutionID}, ids(got))

	// Bad filters are refused, naming the parameter.
	for _, tc := range []struct {
		opts  client.ListOptions
		code  string
		field string
	}{
		{client.ListOptions{Cursor: "not-a-cursor"}, client.CodeInvalidCursor, "cursor"},
		{client.ListOptions{KeyPrefix: "a\x00b"}, client.CodeInvalidPrefix, "key_prefix"},
		{client.ListOptions{WorkflowIDPrefix: "\xff"}, client.CodeInvalidPrefix, "workflow_id_prefix"},
	} {
		_, err := c.List(ctx, tc.opts)
		apiErr := stacktest.RequireAPIError(t, err, http.StatusBadRequest, tc.code)
		require.Equal(t, tc.field, apiErr.Field)
	}
	resp, err := http.Get(s.URL() + "/api/harvest/executions?created_after=yesterday")
	require.NoError(t, err)
	defer resp.Body.Close()
	var answer client.ErrorResponse
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&answer))
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Equal(t, client.CodeInvalidTime, answer.Error)
	require.Equal(t, "created_after", answer.Field)
}
