package workerrt_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestAHistoryLargerThanNATSCarriesRuns: a workflow whose history
// outgrows what NATS carries (five signals of 400 kB each) runs to its
// end, on a worker that keeps nothing between tasks (its cache off), so
// that every task fetches the history before the events it carries, and
// the last ones carry none (more than NATS carries): the worker fetches
// it all, in pages. A workflow task whose decisions are too large to
// report still fails its workflow on the worker, instead of being handed
// back for ever. The shard goes on: an ordinary start completes.
func TestAHistoryLargerThanNATSCarriesRuns(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Worker: harvest.WorkerConfig{WorkflowCacheSize: -1}, Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "double", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "echo_text", in+in).Get(&out)
			return out, err
		})
		harvest.RegisterActivity(w, "echo_text", func(_ *harvest.ActivityContext, in string) (string, error) { return in, nil })
		harvest.RegisterWorkflow(w, "weigh", func(ctx *harvest.WorkflowContext, n int) (int, error) {
			total := 0
			for range n {
				item, err := harvest.NewSignal[string]("item").Receive(ctx)
				if err != nil {
					return 0, err
				}
				total += len(item)
			}
			return total, nil
		})
	}})

	st := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/weigh/start", nil, `{"input": 5}`)
	require.Equal(t, 201, st.Status, st.Body)
	weigh := st.Body["execution_id"].(string)
	big := strings.Repeat("a", 400_000)
	for i := range 5 {
		r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+weigh+"/signals/item", map[string]string{"Idempotency-Key": fmt.Sprint("big-", i)},
			`"`+big+`"`)
		require.Equal(t, 202, r.Status, r.Body)
	}
	exec := stacktest.WaitCompleted(t, s, weigh)
	require.EqualValues(t, 5*400_000, exec["result"])
	require.Greater(t, stacktest.DBCount(t, s, `SELECT sum(length(attrs::text))::int FROM history_events WHERE execution_id = $1`, weigh), 2_000_000)
	fetches := probe.Value(t, probe.Scrape(t, s.URL()+"/metrics"), "harvest_worker_history_fetches_total", "workflow", "weigh", "result", "fetched")
	require.GreaterOrEqual(t, fetches, 1.0, "its tasks after the first fetched the history they did not carry")

	failedWith := func(id, typ string) {
		t.Helper()
		var exec stacktest.Answer
		probe.Until(t, 60*time.Second, "execution "+id+" to fail", func() bool {
			exec = stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
			return exec.Status == 200 && exec.Body["status"] == "Failed"
		})
		raw, err := json.Marshal(exec.Body["error"])
		require.NoError(t, err)
		require.Contains(t, string(raw), typ)
	}
	st = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/double/start", nil, `{"input": "`+strings.Repeat("b", 600_000)+`"}`)
	require.Equal(t, 201, st.Status, st.Body)
	failedWith(st.Body["execution_id"].(string), "WorkflowTaskTooLarge")

	st = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "after-big"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, st.Status, st.Body)
	stacktest.WaitCompleted(t, s, st.Body["execution_id"].(string))
}
