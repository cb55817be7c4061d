package e2e

import (
	"fmt"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// TestChargesHappenOnceAcrossKilledWorkers runs the charge example on
// worker processes against a payment provider that outlives them (served
// by the test). A worker is killed after the provider accepted a charge
// and before Harvest heard of it: the retry carries the same key, reconciles,
// and the ledger holds one charge. Then 100 charges run while workers are
// killed three times: the ledger holds exactly 100 more.
func TestChargesHappenOnceAcrossKilledWorkers(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	provider := fakepay.New()
	var (
		holdFirst = make(chan fakepay.Charge, 1)
		release   = make(chan struct{})
		held      atomic.Bool
	)
	provider.AfterCharge = func(c fakepay.Charge) {
		if held.CompareAndSwap(false, true) {
			holdFirst <- c
			<-release // the worker dies while the provider holds its answer
		}
	}
	payments := httptest.NewServer(fakepay.NewHandler(provider))
	t.Cleanup(payments.Close)
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
	})
	c := startCluster(t, "HARVEST_FAKEPAY_URL="+payments.URL)

	status, body := c.post(t, "/api/harvest/workflows/charge/start", "order-held", `{"input": {"amount_cents": 1999, "customer_id": "cus_held"}}`)
	require.Equal(t, 201, status, body)
	id := body["execution_id"].(string)
	select {
	case <-holdFirst:
	case <-time.After(60 * time.Second):
		t.Fatal("the provider never saw the charge")
	}
	c.work.kill()
	close(release)
	c.work.start()
	probe.Until(t, 2*time.Minute, "the held charge to complete", func() bool {
		return c.count(t, `SELECT count(*) FROM executions WHERE execution_id = $1 AND status = 'Completed'`, id) == 1
	})
	require.Equal(t, 1, provider.Charges(), "the retry found the charge instead of making another")
	require.Equal(t, 1, c.count(t, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'ActivityCompleted' AND (attrs->>'attempt')::int >= 2`, id))

	const n = 100
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() {
			status, body := c.post(t, "/api/harvest/workflows/charge/start", fmt.Sprintf("order-%d", i),
				fmt.Sprintf(`{"input": {"amount_cents": %d, "customer_id": "cus_%d"}}`, 100+i, i))
			assert.Contains(t, []int{201, 202}, status, body)
		})
	}
	for _, at := range []int{15, 45, 75} {
		probe.Until(t, 2*time.Minute, fmt.Sprintf("%d charges", at), func() bool { return provider.Charges() >= 1+at })
		c.work.kill()
		c.work.start()
	}
	wg.Wait()
	probe.Until(t, 4*time.Minute, "every charge workflow to complete", func() bool {
		return c.count(t, `SELECT count(*) FROM executions WHERE workflow_name = 'charge' AND status = 'Completed'`) == n+1
	})
	require.Equal(t, n+1, provider.Charges(), "exactly one charge per workflow")
	t.Logf("provider requests: %d for %d charges", provider.Requests(), provider.Charges())
}
