package e2e

import (
	"fmt"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// logged says whether the process's current run has logged s.
func (p *proc) logged(s string) bool {
	data, err := os.ReadFile(fmt.Sprintf("%s.%d.log", p.log, p.n))
	return err == nil && strings.Contains(string(data), s)
}

// startReady starts the process and waits until it logs ready.
func (p *proc) startReady(ready string) {
	p.t.Helper()
	p.start()
	probe.Until(p.t, 60*time.Second, p.name+" to be ready", func() bool { return p.logged(ready) })
}

// TestAKilledWorkerIsNoticedInSeconds runs the charge example on worker
// processes against a payment provider served by the test, and SIGKILLs
// the worker that runs a charge after the provider made it and before
// the worker heard back, with a second worker running. With
// HARVEST_TASK_ACK_WAIT=2s (startCluster) the charge completes within
// three ack waits plus the activity's first retry wait (2 s), far below
// its 10-second start-to-close timeout, and the provider holds one
// charge: once while the charge runs as an eager attempt 1 inside a
// workflow task, once as a dispatched attempt. Then a worker told to stop
// (SIGTERM) while a charge runs lets it finish, reports it, and exits.
func TestAKilledWorkerIsNoticedInSeconds(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and kills real processes")
	}
	const (
		ackWait   = 2 * time.Second // startCluster's HARVEST_TASK_ACK_WAIT
		retryWait = 2 * time.Second // charge_card's RetryExponential(5, 2s)
		bound     = 3*ackWait + retryWait
		ready     = "worker ready"
	)
	provider := fakepay.New()
	var (
		mu   sync.Mutex
		gate = make(chan struct{})
		held = make(chan fakepay.Charge, 4)
	)
	// Each new charge is held until release: its worker made it and has
	// not heard back.
	provider.AfterCharge = func(c fakepay.Charge) {
		mu.Lock()
		g := gate
		mu.Unlock()
		held <- c
		<-g
	}
	release := func() {
		mu.Lock()
		defer mu.Unlock()
		close(gate)
		gate = make(chan struct{})
	}
	payments := httptest.NewServer(fakepay.NewHandler(provider))
	t.Cleanup(payments.Close)
	t.Cleanup(release)
	c := startCluster(t, "HARVEST_FAKEPAY_URL="+payments.URL)
	spare := &proc{t: t, name: "spare worker", bin: c.work.bin, env: c.work.env, log: c.work.log + "-spare"}
	probe.Until(t, 60*time.Second, "the worker to be ready", func() bool { return c.work.logged(ready) })

	// charge starts a charge and waits until the provider holds it.
	charge := func(key string) string {
		status, body := c.post(t, "/api/harvest/workflows/charge/start", key, `{"input": {"amount_cents": 1999, "customer_id": "cus_`+key+`"}}`)
		require.Equal(t, 201, status, body)
		select {
		case <-held:
		case <-time.After(60 * time.Second):
			t.Fatalf("the provider never saw charge %s", key)
		}
		return body["execution_id"].(string)
	}
	// killDuring kills the worker running the held charge id, with spare
	// running, and returns how long the charge took to complete after.
	killDuring := func(id string, running, spare *proc) time.Duration {
		spare.startReady(ready)
		running.kill()
		died := time.Now()
		release()
		probe.Until(t, 2*time.Minute, "the charge to complete", func() bool {
			return c.count(t, `SELECT count(*) FROM executions WHERE execution_id = $1 AND status = 'Completed'`, id) == 1
		})
		return time.Since(died)
	}
	completedAt := func(id string) int {
		var attempt int
		require.NoError(t, c.db.QueryRow(c.ctx, `SELECT (attrs->>'attempt')::int FROM history_events WHERE execution_id = $1 AND type = 'ActivityCompleted'`, id).Scan(&attempt))
		return attempt
	}

	// 1. Killed during an eager attempt: its workflow task is delivered
	// again to the spare, which counts attempt 1 lost.
	id := charge("eager")
	took := killDuring(id, c.work, spare)
	t.Logf("eager attempt: completed %s after its worker was killed (bound %s)", took, bound)
	require.Less(t, took, bound)
	require.Equal(t, 2, completedAt(id), "attempt 2 reconciled")
	require.Equal(t, 1, provider.Charges())

	// 2. Killed during a dispatched attempt: its activity task is
	// delivered again to the other worker, which reports it lost.
	spare.kill()
	spare.env = append(spare.env, "HARVEST_DISABLE_EAGER_ACTIVITIES=true")
	spare.startReady(ready)
	id = charge("dispatched")
	took = killDuring(id, spare, c.work)
	t.Logf("dispatched attempt: completed %s after its worker was killed (bound %s)", took, bound)
	require.Less(t, took, bound)
	require.Equal(t, 2, completedAt(id), "attempt 2 reconciled")
	require.Equal(t, 2, provider.Charges())

	// 3. SIGTERM while a charge runs: the worker stops pulling, lets the
	// charge finish within its grace (30 s by default), reports it, and
	// exits cleanly.
	id = charge("graceful")
	require.NoError(t, c.work.cmd.Process.Signal(syscall.SIGTERM))
	probe.Until(t, 30*time.Second, "the worker to begin stopping", func() bool { return c.work.logged("worker stopping") })
	exited := make(chan error, 1)
	go func() { exited <- c.work.cmd.Wait() }()
	select {
	case err := <-exited:
		t.Fatalf("the worker exited while a charge was running: %v", err)
	default:
	}
	release()
	select {
	case err := <-exited:
		require.NoError(t, err, "exit status")
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not exit once its charge finished")
	}
	probe.Until(t, 30*time.Second, "the graceful charge to complete", func() bool {
		return c.count(t, `SELECT count(*) FROM executions WHERE execution_id = $1 AND status = 'Completed'`, id) == 1
	})
	require.Equal(t, 1, completedAt(id), "reported by the stopping worker, not retried")
	require.Equal(t, 3, provider.Charges(), "one charge per workflow")
	require.Equal(t, 3, provider.Requests(), "every retry found its charge instead of asking again")
}
