package main

import (
	"encoding/json"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
)

// testClock is real time plus an offset a test moves.
type testClock struct{ offset atomic.Int64 }

func (c *testClock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *testClock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

// TestExecutionsPrune: `harvest executions prune --dry-run` prints what
// is past retention by workflow (or its JSON) with a read token and
// prunes nothing; `harvest executions prune` needs the admin scope, asks
// the schedulers to prune, waits until what it asked for is gone and
// exits 0; when a row stays locked past --timeout it fails saying what is
// left. The stack's pruner sleeps for an hour, so only the command wakes
// it, and its clock is moved past the retention.
func TestExecutionsPrune(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
	})
	require.NoError(t, err)
	clk := &testClock{}
	s := startStack(t, devstack.Config{
		Ingest:    ingest.Config{Auth: a},
		Scheduler: scheduler.Config{Retention: 48 * time.Hour, Now: clk.Now, PruneInterval: time.Hour},
	})
	ctx := natstest.Context(t)
	c, err := client.New(client.Config{BaseURL: s.URL(), Token: "t-ops"})
	require.NoError(t, err)
	var charges []string
	for range 3 {
		r, err := c.Start(ctx, "charge", json.RawMessage(`{"amount_cents": 100, "customer_id": "c"}`), client.StartOptions{})
		require.NoError(t, err)
		_, err = c.WaitResult(ctx, r.ExecutionID, nil)
		require.NoError(t, err)
		charges = append(charges, r.ExecutionID)
	}
	prune := func(token string, args ...string) (string, string, error) {
		t.Helper()
		return runCLI(t, append([]string{"executions", "prune", "--addr", s.URL(), "--token", token}, args...)...)
	}
	stamp := `\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z`

	out, _, err := prune("t-reader", "--dry-run")
	require.NoError(t, err)
	require.Regexp(t, "^as of "+stamp+" nothing is past retention\n$", out)

	clk.Advance(49 * time.Hour)
	out, _, err = prune("t-reader", "--dry-run")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile("^as of "+stamp+": 3 executions past retention, 0 closed without a prune time yet\n"+
		"WORKFLOW +PAST_RETENTION +OLDEST_PRUNE_AFTER +CLOSED_WITHOUT_PRUNE_AFTER\n"+
		"charge +3 +"+stamp+" +0\n$"), out)
	out, _, err = prune("t-reader", "--dry-run", "--json")
	require.NoError(t, err)
	var dry client.RetentionResponse
	require.NoError(t, json.Unmarshal([]byte(out), &dry), out)
	require.EqualValues(t, 3, dry.PastRetention)
	require.Len(t, dry.Workflows, 1)
	// A dry run prunes nothing, and a read token may not prune.
	_, _, err = prune("t-reader")
	require.ErrorContains(t, err, "forbidden")
	require.ErrorContains(t, err, "lacks scope admin")
	for _, id := range charges {
		_, err := c.Describe(ctx, id)
		require.NoError(t, err)
	}

	// An apply would hold an execution's row so: the pruner skips it, and
	// the command gives up at its --timeout, saying what is left.
	tx, err := s.DB.Begin(ctx)
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(ctx) }()
	_, err = tx.Exec(ctx, `SELECT 1 FROM executions WHERE execution_id = $1 FOR UPDATE`, charges[0])
	require.NoError(t, err)
	out, _, err = prune("t-ops", "--timeout", "3s")
	require.ErrorContains(t, err, "1 execution past retention as of")
	require.ErrorContains(t, err, "--timeout passed")
	require.Regexp(t, "^asked the schedulers to prune; as of "+stamp+": 3 executions past retention", out)
	require.NoError(t, tx.Rollback(ctx))
	_, err = c.Describe(ctx, charges[1])
	require.ErrorIs(t, err, client.ErrExecutionNotFound)

	// Unlocked, the next prune takes it, and waits for it.
	out, _, err = prune("t-ops")
	require.NoError(t, err)
	require.Regexp(t, regexp.MustCompile("^asked the schedulers to prune; as of "+stamp+": 1 execution past retention, 0 closed without a prune time yet\n"+
		"WORKFLOW +PAST_RETENTION +OLDEST_PRUNE_AFTER +CLOSED_WITHOUT_PRUNE_AFTER\n"+
		"charge +1 +"+stamp+" +0\n"+
		"pruned: nothing past retention as of "+stamp+" is left\n$"), out)
	_, err = c.Describe(ctx, charges[0])
	require.ErrorIs(t, err, client.ErrExecutionNotFound)

	// Nothing left: it says so and does not wait; --json prints the answer
	// alone.
	out, _, err = prune("t-ops", "--json")
	require.NoError(t, err)
	var none client.RetentionResponse
	require.NoError(t, json.Unmarshal([]byte(out), &none), out)
	require.False(t, none.Pending())
	require.Empty(t, none.Workflows)
	require.True(t, strings.HasSuffix(out, "}\n"))
}
