package scheduler_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestABatchResetsTheExecutionsAnOutageFailed: executions failed by a
// provider outage at their charge are reset to it by one batch, at its
// rate: each runs the charge again with its key and completes, none runs
// its reservation again, and the batch completes with every execution
// counted once. The same Idempotency-Key answers the same batch; a
// batch over the executions the first made matches none of them (they
// were created after it), and the first batch's runs are not its own.
func TestABatchResetsTheExecutionsAnOutageFailed(t *testing.T) {
	t.Parallel()
	p := &provider{}
	p.outage.Store(true)
	s := resetStack(t, p)
	const n = 8
	ids := make([]string, n)
	for i := range ids {
		ids[i] = stacktest.StartWorkflow(t, s, "order", "", fmt.Sprintf(`{"workflow_id": "outage-%d"}`, i)).Body["execution_id"].(string)
	}
	probe.Until(t, 30*time.Second, "every reservation", func() bool { return len(p.keys("reserve_stock")) == n })
	for i, id := range ids {
		require.Equal(t, true, stacktest.Signal(t, s, id, "approve", fmt.Sprintf("approve-%d", i), "", `"ops"`).Body["signal_delivered"])
	}
	for _, id := range ids {
		waitStatus(t, s, id, "Failed")
	}
	charged := map[string]bool{}
	for _, k := range p.keys("charge_payment") {
		charged[k] = true
	}
	require.Len(t, charged, n)
	p.outage.Store(false)

	body := `{"operation": "reset", "filter": {"workflow": "order", "status": "Failed"},
		"reset": {"to": {"activity": "charge_payment", "occurrence": "last_failed"}}, "reason": "provider outage", "rate": 4}`
	create := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", map[string]string{"Idempotency-Key": "outage-reset"}, body)
	require.Equal(t, 201, create.Status, create.Body)
	batchID := create.Body["batch_id"].(string)
	require.Equal(t, "running", create.Body["state"])
	again := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", map[string]string{"Idempotency-Key": "outage-reset"}, body)
	require.Equal(t, 200, again.Status, again.Body)
	require.Equal(t, batchID, again.Body["batch_id"])

	var b map[string]any
	probe.Until(t, 60*time.Second, "the batch to complete", func() bool {
		b = stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/"+batchID, nil, "").Body
		return b["state"] == "completed"
	})
	require.Equal(t, float64(n), b["matched"], b)
	require.Equal(t, float64(n), b["done"], b)
	require.Equal(t, float64(0), b["failed"], b)
	require.Equal(t, []any{}, b["errors"])
	require.NotNil(t, b["finished_at"])
	for _, id := range ids {
		old := execution(t, s, id)
		require.Equal(t, "Failed", old["status"])
		newID, _ := old["reset_to"].(string)
		require.NotEmpty(t, newID, "execution %s was reset", id)
		require.Equal(t, "charge_payment done (ops)", waitStatus(t, s, newID, "Completed")["result"])
	}
	require.Len(t, p.keys("reserve_stock"), n, "no reservation ran again")
	keys := p.keys("charge_payment")
	require.Len(t, keys, 2*n)
	for _, k := range keys {
		require.True(t, charged[k], "every charge ran again with the key it had")
	}

	// A second batch over Failed executions of order: the first runs are
	// its own no more (they were reset), the new ones came after it.
	second := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil,
		`{"operation": "terminate", "filter": {"workflow": "order", "status": "Running"}, "reason": "none match"}`)
	require.Equal(t, 201, second.Status, second.Body)
	probe.Until(t, 30*time.Second, "the second batch to complete", func() bool {
		b = stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/"+second.Body["batch_id"].(string), nil, "").Body
		return b["state"] == "completed"
	})
	require.Equal(t, float64(0), b["matched"])
	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches", nil, "")
	require.Equal(t, 200, list.Status)
	require.Len(t, list.Body["batches"], 2)
	require.Equal(t, second.Body["batch_id"], list.Body["batches"].([]any)[0].(map[string]any)["batch_id"], "newest first")
}

// TestABatchRefusesWhatItCannotRun: a malformed batch is refused before
// anything is created, with the field at fault; an unknown batch is 404;
// a running batch cancelled sends no more, and a batch's errors list the
// executions it was refused on.
func TestABatchRefusesWhatItCannotRun(t *testing.T) {
	t.Parallel()
	p := &provider{}
	s := resetStack(t, p)
	post := func(body string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil, body)
	}
	for _, tc := range []struct{ body, code, field string }{
		{`{"operation": "terminate", "filter": {}}`, "invalid_filter", "filter"},
		{`{"operation": "terminate", "filter": {"status": "Sleeping"}}`, "invalid_filter", "filter.status"},
		{`{"operation": "terminate", "filter": {"created_after": "yesterday"}}`, "invalid_filter", "filter.created_after"},
		{`{"operation": "terminate", "filter": {"created_after": "2026-12-07T10:00:00Z", "created_before": "2026-12-07T09:00:00Z"}}`, "invalid_filter", "filter.created_after"},
		{`{"operation": "terminate", "filter": {"workflow": "a b"}}`, "invalid_filter", "filter.workflow"},
		{`{"operation": "archive", "all": true}`, "invalid_batch", "operation"},
		{`{"operation": "signal", "all": true}`, "invalid_batch", "signal.name"},
		{`{"operation": "reset", "all": true, "reset": {"to": "middle"}}`, "invalid_batch", "reset.to"},
		{`{"operation": "cancel", "all": true, "rate": 5000}`, "invalid_batch", "rate"},
		{`{"operation": "cancel", "all": true, "filters": {}}`, "unknown_field", "filters"},
	} {
		r := post(tc.body)
		require.Equal(t, 400, r.Status, "%s: %v", tc.body, r.Body)
		require.Equal(t, tc.code, r.Body["error"], "%s: %v", tc.body, r.Body)
		require.Equal(t, tc.field, r.Body["field"], "%s: %v", tc.body, r.Body)
	}
	require.Empty(t, stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches", nil, "").Body["batches"])
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/6f1c7d7e-1111-4222-8333-944444444444", nil, "").Status)
	require.Equal(t, 404, stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/nope", nil, "").Status)

	// Executions waiting for their approval, signalled by a batch; one
	// closed already, which the signal is refused on.
	var ids []string
	for i := range 3 {
		ids = append(ids, stacktest.StartWorkflow(t, s, "order", "", fmt.Sprintf(`{"workflow_id": "batch-sig-%d"}`, i)).Body["execution_id"].(string))
	}
	probe.Until(t, 30*time.Second, "every reservation", func() bool { return len(p.keys("reserve_stock")) == 3 })
	require.Equal(t, 200, stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+ids[0]+"/terminate", nil, `{"reason": "gone"}`).Status)
	r := post(`{"operation": "signal", "filter": {"workflow_id_prefix": "batch-sig-"}, "signal": {"name": "approve", "payload": "batch"}}`)
	require.Equal(t, 201, r.Status, r.Body)
	var b map[string]any
	probe.Until(t, 30*time.Second, "the signal batch to complete", func() bool {
		b = stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/"+r.Body["batch_id"].(string), nil, "").Body
		return b["state"] == "completed"
	})
	require.Equal(t, float64(3), b["matched"], b)
	require.Equal(t, float64(2), b["done"], b)
	require.Equal(t, float64(1), b["failed"], b)
	errs := b["errors"].([]any)
	require.Len(t, errs, 1)
	require.Equal(t, ids[0], errs[0].(map[string]any)["execution_id"])
	require.Equal(t, "execution_terminal", errs[0].(map[string]any)["error"])
	for _, id := range ids[1:] {
		require.Equal(t, "charge_payment done (batch)", waitStatus(t, s, id, "Completed")["result"])
	}

	// A slow batch over every execution, cancelled at once: it stops.
	slow := post(`{"operation": "terminate", "all": true, "rate": 1, "reason": "slow"}`)
	require.Equal(t, 201, slow.Status, slow.Body)
	c := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches/"+slow.Body["batch_id"].(string)+"/cancel", nil, "")
	require.Equal(t, 200, c.Status, c.Body)
	require.Equal(t, "cancelled", c.Body["state"])
	require.Less(t, c.Body["matched"].(float64), float64(3), "a batch of 1 a second cancelled at once sent to fewer than all")
}
