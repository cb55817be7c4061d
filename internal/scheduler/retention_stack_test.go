package scheduler_test

import (
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// clock is a controllable clock: real time plus an offset a test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func rowsNaming(t *testing.T, s *devstack.Stack, table, id string) int {
	t.Helper()
	return stacktest.DBCount(t, s, `SELECT count(*) FROM `+table+` WHERE execution_id = $1`, id)
}

// TestRetentionPrunesClosedExecutions runs executions that leave a row in
// every table that names an execution (history, activities, a keyed
// signal, a completion callback, a start claim), moves the pruner's
// clock past their retention, and checks that each is gone with every row
// naming it, while running executions, however old, stay; that reads and
// signals then answer 404 and lists leave it out; and that its start key
// starts afresh. A finished batch operation is pruned after the
// deployment's retention too.
func TestRetentionPrunesClosedExecutions(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	policy := callback.Policy{AllowHosts: []string{"127.0.0.0/8"}}
	clk := &clock{}
	s := stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{CallbackPolicy: policy},
		Scheduler: scheduler.Config{
			CallbackPolicy: policy, CallbackPollInterval: 20 * time.Millisecond,
			Retention:           48 * time.Hour,
			RetentionByWorkflow: map[string]time.Duration{"collect": 96 * time.Hour},
			Now:                 clk.Now, PruneInterval: 20 * time.Millisecond, PruneBatchSize: 2,
		},
	})

	// Closed: a keyed charge with a callback, and a collect that took a
	// keyed signal.
	charge := stacktest.StartWorkflow(t, s, "charge", "k-retained", `{`+stacktest.ChargeInput+`, "completion_callback": "`+receiver.URL+`/done"}`)
	require.Equal(t, 201, charge.Status, charge.Body)
	chargeID := charge.Body["execution_id"].(string)
	collect := stacktest.StartWorkflow(t, s, "collect", "k-collect", `{"input": {"count": 1}}`)
	require.Equal(t, 201, collect.Status, collect.Body)
	collectID := collect.Body["execution_id"].(string)
	sig := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+collectID+"/signals/item", map[string]string{"Idempotency-Key": "sig-1"}, `1`)
	require.Equal(t, 202, sig.Status, sig.Body)
	// Running, on durable timers and signals: never pruned.
	sleeping := stacktest.StartWorkflow(t, s, "sleep", "", `{"input": {"duration": "10000h"}}`)
	require.Equal(t, 201, sleeping.Status, sleeping.Body)
	sleepID := sleeping.Body["execution_id"].(string)
	waiting := stacktest.StartWorkflow(t, s, "collect", "", `{"input": {"count": 5}}`)
	require.Equal(t, 201, waiting.Status, waiting.Body)
	waitingID := waiting.Body["execution_id"].(string)

	stacktest.WaitCompleted(t, s, chargeID)
	stacktest.WaitCompleted(t, s, collectID)
	probe.Until(t, 30*time.Second, "the callback to be delivered", func() bool {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM callback_deliveries WHERE execution_id = $1 AND delivered_at IS NOT NULL`, chargeID) == 1
	})
	probe.Until(t, 30*time.Second, "the sleep's timer", func() bool { return rowsNaming(t, s, "timers", sleepID) == 1 })
	for table, id := range map[string]string{
		"history_events": chargeID, "activities": chargeID, "callback_deliveries": chargeID, "start_claims": chargeID,
		"signal_claims": collectID, "executions": collectID,
	} {
		require.Positive(t, rowsNaming(t, s, table, id), "%s has a row of %s before the prune", table, id)
	}

	// A batch operation that finished at once (it matches nothing).
	batch := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil, `{"operation": "terminate", "filter": {"workflow_id_prefix": "no-such-"}}`)
	require.Equal(t, 201, batch.Status, batch.Body)
	batchURL := s.URL() + "/api/harvest/batches/" + batch.Body["batch_id"].(string)
	probe.Until(t, 30*time.Second, "the batch to complete", func() bool {
		return stacktest.Call(t, "GET", batchURL, nil, "").Body["state"] == "completed"
	})

	// Past charge's retention (48h), not collect's (96h); the batch goes
	// after the deployment's.
	clk.Advance(49 * time.Hour)
	probe.Until(t, 30*time.Second, "the finished batch to be pruned", func() bool {
		return stacktest.Call(t, "GET", batchURL, nil, "").Status == 404
	})
	probe.Until(t, 30*time.Second, "charge's execution to be pruned", func() bool { return rowsNaming(t, s, "executions", chargeID) == 0 })
	require.Equal(t, 1, rowsNaming(t, s, "executions", collectID), "collect keeps its own, longer retention")
	for _, table := range store.PrunedTables {
		require.Zero(t, rowsNaming(t, s, table, chargeID), "%s still names the pruned execution", table)
	}
	clk.Advance(48 * time.Hour)
	probe.Until(t, 30*time.Second, "collect's execution to be pruned", func() bool { return rowsNaming(t, s, "executions", collectID) == 0 })
	for _, table := range store.PrunedTables {
		require.Zero(t, rowsNaming(t, s, table, collectID), "%s still names the pruned execution", table)
	}
	// Running executions stay, with their rows, however old.
	for _, id := range []string{sleepID, waitingID} {
		require.Equal(t, 1, rowsNaming(t, s, "executions", id))
		require.Positive(t, rowsNaming(t, s, "history_events", id))
	}
	require.Equal(t, 1, rowsNaming(t, s, "timers", sleepID))

	// Pruned is gone for every reader.
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+chargeID, nil, "").Status)
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+chargeID+"/history", nil, "").Status)
	// (A retry of the same keyed signal within the broker's duplicate
	// window, minutes, would be answered from its first outcome; a prune
	// comes at least start_idempotency_window after the close.)
	again := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+collectID+"/signals/item", map[string]string{"Idempotency-Key": "sig-2"}, `1`)
	require.Equal(t, 404, again.Status, again.Body)
	require.Equal(t, "execution_not_found", again.Body["error"])
	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?limit=100", nil, "")
	require.Equal(t, 200, list.Status)
	for _, e := range list.Body["executions"].([]any) {
		id := e.(map[string]any)["execution_id"]
		require.NotContains(t, []any{chargeID, collectID}, id, "a pruned execution is listed")
	}

	// Read before the retry below, whose execution closes past its
	// retention by the moved clock and may be in the backlog a moment.
	body := getText(t, s.URL()+"/metrics")
	require.Contains(t, body, "harvest_retention_pruned_executions_total 2")
	require.True(t, strings.Contains(body, `harvest_retention_pruned_rows_total{table="history_events"}`))
	require.Contains(t, body, "harvest_retention_backlog_executions 0")

	// The key went with its execution: a retry starts afresh.
	fresh := stacktest.StartWorkflow(t, s, "charge", "k-retained", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, fresh.Status, fresh.Body)
	require.Equal(t, true, fresh.Body["started_fresh"])
	require.NotEqual(t, chargeID, fresh.Body["execution_id"])
}

func getText(t *testing.T, url string) string {
	t.Helper()
	resp, err := http.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	var b strings.Builder
	_, err = io.Copy(&b, resp.Body)
	require.NoError(t, err)
	return b.String()
}

// TestRetentionRoutesTellAndPruneNow drives GET /api/harvest/retention
// and POST /api/harvest/retention/prune through the Go client against a
// stack whose pruner sleeps for an hour, so that only a prune request
// wakes it: what is past retention is told by workflow (with the oldest
// prune time, and the executions that closed before retention existed),
// by the stack's clock or at an as_of; a prune request empties it; a read
// token may tell but not prune, an admin token limited to some workflows
// may not prune either, and a token limited to charge sees charge's.
func TestRetentionRoutesTellAndPruneNow(t *testing.T) {
	t.Parallel()
	a, err := auth.New([]auth.Token{
		{Name: "ops", SHA256: auth.Hash("t-ops"), Scopes: []auth.Scope{auth.ScopeAdmin}},
		{Name: "reader", SHA256: auth.Hash("t-reader"), Scopes: []auth.Scope{auth.ScopeRead}},
		{Name: "charge-reader", SHA256: auth.Hash("t-charge-reader"), Scopes: []auth.Scope{auth.ScopeRead}, Workflows: []string{"charge"}},
		{Name: "charge-admin", SHA256: auth.Hash("t-charge-admin"), Scopes: []auth.Scope{auth.ScopeAdmin}, Workflows: []string{"charge"}},
	})
	require.NoError(t, err)
	clk := &clock{}
	s := stacktest.Start(t, devstack.Config{
		Ingest: ingest.Config{Auth: a},
		Scheduler: scheduler.Config{
			Retention: 48 * time.Hour, RetentionByWorkflow: map[string]time.Duration{"onboarding": 72 * time.Hour},
			Now: clk.Now, PruneInterval: time.Hour,
		},
	})
	ctx := natstest.Context(t)
	as := func(token string) *client.Client {
		t.Helper()
		c, err := client.New(client.Config{BaseURL: s.URL(), Token: token})
		require.NoError(t, err)
		return c
	}
	ops, reader, chargeReader, chargeAdmin, nobody := as("t-ops"), as("t-reader"), as("t-charge-reader"), as("t-charge-admin"), as("")

	// Two charges and an onboarding close; a collect keeps waiting for
	// signals.
	var charges []string
	var firstClose time.Time
	for range 2 {
		r, err := ops.Start(ctx, "charge", json.RawMessage(`{"amount_cents": 100, "customer_id": "c"}`), client.StartOptions{})
		require.NoError(t, err)
		e, err := ops.WaitResult(ctx, r.ExecutionID, nil)
		require.NoError(t, err)
		if firstClose.IsZero() || e.ClosedAt.Before(firstClose) {
			firstClose = *e.ClosedAt
		}
		charges = append(charges, r.ExecutionID)
	}
	r, err := ops.Start(ctx, "onboarding", json.RawMessage(`{"user_id": 1}`), client.StartOptions{})
	require.NoError(t, err)
	onboarding := r.ExecutionID
	onboarded, err := ops.WaitResult(ctx, onboarding, nil)
	require.NoError(t, err)
	r, err = ops.Start(ctx, "collect", json.RawMessage(`{"count": 5}`), client.StartOptions{})
	require.NoError(t, err)
	running := r.ExecutionID
	// The onboarding closed before retention existed, as it were: no
	// prune time until a pruner gives it one.
	_, err = s.DB.Exec(ctx, `UPDATE executions SET prune_after = NULL WHERE execution_id = $1`, onboarding)
	require.NoError(t, err)

	// Now, nothing is past retention; the onboarding waits for its
	// prune time.
	got, err := reader.Retention(ctx, time.Time{})
	require.NoError(t, err)
	require.Zero(t, got.PastRetention)
	require.EqualValues(t, 1, got.ClosedWithoutPruneAfter)
	require.Equal(t, []client.WorkflowRetention{{WorkflowName: "onboarding", ClosedWithoutPruneAfter: 1}}, got.Workflows)
	require.WithinDuration(t, time.Now(), got.AsOf, time.Minute)

	// Past charge's retention (48h), not onboarding's (72h), by the
	// stack's clock, which ingest tells by too.
	clk.Advance(49 * time.Hour)
	got, err = reader.Retention(ctx, time.Time{})
	require.NoError(t, err)
	require.WithinDuration(t, clk.Now(), got.AsOf, time.Minute)
	require.EqualValues(t, 2, got.PastRetention)
	require.EqualValues(t, 1, got.ClosedWithoutPruneAfter)
	require.Len(t, got.Workflows, 2)
	charge := got.Workflows[0]
	require.Equal(t, "charge", charge.WorkflowName)
	require.EqualValues(t, 2, charge.PastRetention)
	require.Zero(t, charge.ClosedWithoutPruneAfter)
	require.NotNil(t, charge.OldestPruneAfter)
	require.WithinDuration(t, firstClose.Add(48*time.Hour), *charge.OldestPruneAfter, 10*time.Millisecond)
	require.Equal(t, client.WorkflowRetention{WorkflowName: "onboarding", ClosedWithoutPruneAfter: 1}, got.Workflows[1])
	// At an as_of before the clock moved, nothing was past retention.
	earlier, err := reader.Retention(ctx, time.Now())
	require.NoError(t, err)
	require.Zero(t, earlier.PastRetention)
	bad := stacktest.Call(t, "GET", s.URL()+"/api/harvest/retention?as_of=yesterday", map[string]string{"Authorization": "Bearer t-reader"}, "")
	require.Equal(t, 400, bad.Status, bad.Body)
	require.Equal(t, "invalid_time", bad.Body["error"])
	require.Equal(t, "as_of", bad.Body["field"])
	// A token limited to charge sees charge's.
	limited, err := chargeReader.Retention(ctx, time.Time{})
	require.NoError(t, err)
	require.Equal(t, []client.WorkflowRetention{charge}, limited.Workflows)
	require.EqualValues(t, 2, limited.PastRetention)
	require.Zero(t, limited.ClosedWithoutPruneAfter)

	// Refused: no token, a read token, an admin token limited to charge.
	_, err = nobody.Retention(ctx, time.Time{})
	require.ErrorIs(t, err, client.ErrUnauthenticated)
	_, err = nobody.PruneNow(ctx)
	require.ErrorIs(t, err, client.ErrUnauthenticated)
	_, err = reader.PruneNow(ctx)
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorContains(t, err, `lacks scope admin`)
	_, err = chargeAdmin.PruneNow(ctx)
	require.ErrorIs(t, err, client.ErrForbidden)
	require.ErrorContains(t, err, "a prune acts on every workflow")
	// The pruner sleeps: nothing went.
	for _, id := range charges {
		require.Equal(t, 1, rowsNaming(t, s, "executions", id))
	}

	// ops prunes now: the answer is what was past retention then, and
	// following it at its as_of, it empties.
	pruned, err := ops.PruneNow(ctx)
	require.NoError(t, err)
	require.WithinDuration(t, clk.Now(), pruned.AsOf, time.Minute)
	require.EqualValues(t, 2, pruned.PastRetention)
	require.EqualValues(t, 1, pruned.ClosedWithoutPruneAfter)
	require.Equal(t, got.Workflows, pruned.Workflows)
	probe.Until(t, 30*time.Second, "what was past retention to be pruned", func() bool {
		left, err := reader.Retention(ctx, pruned.AsOf)
		require.NoError(t, err)
		return !left.Pending()
	})
	for _, id := range charges {
		_, err := ops.Describe(ctx, id)
		require.ErrorIs(t, err, client.ErrExecutionNotFound)
		for _, table := range store.PrunedTables {
			require.Zero(t, rowsNaming(t, s, table, id), "%s still names a pruned charge", table)
		}
	}
	// The onboarding got its prune time, its close plus 72h, not passed
	// yet; the running collect stays, however old.
	left, err := reader.Retention(ctx, time.Time{})
	require.NoError(t, err)
	require.False(t, left.Pending(), "%+v", left)
	var pruneAfter time.Time
	require.NoError(t, s.DB.QueryRow(ctx, `SELECT prune_after FROM executions WHERE execution_id = $1`, onboarding).Scan(&pruneAfter))
	require.WithinDuration(t, onboarded.ClosedAt.Add(72*time.Hour), pruneAfter, 10*time.Millisecond)
	_, err = ops.Describe(ctx, running)
	require.NoError(t, err)

	// Past onboarding's retention too: told, then pruned on request.
	clk.Advance(24 * time.Hour)
	got, err = reader.Retention(ctx, time.Time{})
	require.NoError(t, err)
	require.EqualValues(t, 1, got.PastRetention)
	require.Equal(t, "onboarding", got.Workflows[0].WorkflowName)
	pruned, err = ops.PruneNow(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, pruned.PastRetention)
	probe.Until(t, 30*time.Second, "the onboarding to be pruned", func() bool {
		left, err := reader.Retention(ctx, pruned.AsOf)
		require.NoError(t, err)
		return !left.Pending()
	})
	_, err = ops.Describe(ctx, onboarding)
	require.ErrorIs(t, err, client.ErrExecutionNotFound)
	_, err = ops.Describe(ctx, running)
	require.NoError(t, err)
}
