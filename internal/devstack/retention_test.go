package devstack_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
)

// clock is a controllable clock: real time plus an offset a test moves.
type clock struct{ offset atomic.Int64 }

func (c *clock) Now() time.Time          { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *clock) Advance(d time.Duration) { c.offset.Add(int64(d)) }

func rowsNaming(t *testing.T, s *devstack.Stack, table, id string) int {
	t.Helper()
	return dbCount(t, s, `SELECT count(*) FROM `+table+` WHERE execution_id = $1`, id)
}

// TestRetentionPrunesClosedExecutions runs executions that leave a row in
// every table that names an execution (history, activities, a keyed
// signal, a completion callback, a start claim), moves the pruner's
// clock past their retention, and checks that each is gone with every row
// naming it, while running executions, however old, stay; that reads and
// signals then answer 404 and lists leave it out; and that its start key
// starts afresh.
func TestRetentionPrunesClosedExecutions(t *testing.T) {
	t.Parallel()
	receiver := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) }))
	t.Cleanup(receiver.Close)
	policy := callback.Policy{AllowHosts: []string{"127.0.0.0/8"}}
	clk := &clock{}
	s := startStack(t, devstack.Config{
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
	charge := start(t, s, "charge", "k-retained", `{`+chargeInput+`, "completion_callback": "`+receiver.URL+`/done"}`)
	require.Equal(t, 201, charge.status, charge.body)
	chargeID := charge.body["execution_id"].(string)
	collect := start(t, s, "collect", "k-collect", `{"input": {"count": 1}}`)
	require.Equal(t, 201, collect.status, collect.body)
	collectID := collect.body["execution_id"].(string)
	sig := call(t, "POST", s.URL()+"/api/harvest/workflows/"+collectID+"/signal/item", map[string]string{"Idempotency-Key": "sig-1"}, `1`)
	require.Equal(t, 202, sig.status, sig.body)
	// Running, on durable timers and signals: never pruned.
	sleeping := start(t, s, "sleep", "", `{"input": {"duration": "10000h"}}`)
	require.Equal(t, 201, sleeping.status, sleeping.body)
	sleepID := sleeping.body["execution_id"].(string)
	waiting := start(t, s, "collect", "", `{"input": {"count": 5}}`)
	require.Equal(t, 201, waiting.status, waiting.body)
	waitingID := waiting.body["execution_id"].(string)

	waitCompleted(t, s, chargeID)
	waitCompleted(t, s, collectID)
	eventually(t, 30*time.Second, "the callback to be delivered", func() bool {
		return dbCount(t, s, `SELECT count(*) FROM callback_deliveries WHERE execution_id = $1 AND delivered_at IS NOT NULL`, chargeID) == 1
	})
	eventually(t, 30*time.Second, "the sleep's timer", func() bool { return rowsNaming(t, s, "timers", sleepID) == 1 })
	for table, id := range map[string]string{
		"history_events": chargeID, "activities": chargeID, "callback_deliveries": chargeID, "start_claims": chargeID,
		"signal_claims": collectID, "executions": collectID,
	} {
		require.Positive(t, rowsNaming(t, s, table, id), "%s has a row of %s before the prune", table, id)
	}

	// Past charge's retention (48h), not collect's (96h).
	clk.Advance(49 * time.Hour)
	eventually(t, 30*time.Second, "charge's execution to be pruned", func() bool { return rowsNaming(t, s, "executions", chargeID) == 0 })
	require.Equal(t, 1, rowsNaming(t, s, "executions", collectID), "collect keeps its own, longer retention")
	for _, table := range store.PrunedTables {
		require.Zero(t, rowsNaming(t, s, table, chargeID), "%s still names the pruned execution", table)
	}
	clk.Advance(48 * time.Hour)
	eventually(t, 30*time.Second, "collect's execution to be pruned", func() bool { return rowsNaming(t, s, "executions", collectID) == 0 })
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
	require.Equal(t, 404, call(t, "GET", s.URL()+"/api/harvest/executions/"+chargeID, nil, "").status)
	require.Equal(t, 404, call(t, "GET", s.URL()+"/api/harvest/executions/"+chargeID+"/history", nil, "").status)
	// (A retry of the same keyed signal within the broker's duplicate
	// window, minutes, would be answered from its first outcome; a prune
	// comes at least start_idempotency_window after the close.)
	again := call(t, "POST", s.URL()+"/api/harvest/workflows/"+collectID+"/signal/item", map[string]string{"Idempotency-Key": "sig-2"}, `1`)
	require.Equal(t, 404, again.status, again.body)
	require.Equal(t, "execution_not_found", again.body["error"])
	list := call(t, "GET", s.URL()+"/api/harvest/executions?limit=100", nil, "")
	require.Equal(t, 200, list.status)
	for _, e := range list.body["executions"].([]any) {
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
	fresh := start(t, s, "charge", "k-retained", `{`+chargeInput+`}`)
	require.Equal(t, 201, fresh.status, fresh.body)
	require.Equal(t, true, fresh.body["started_fresh"])
	require.NotEqual(t, chargeID, fresh.body["execution_id"])
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
