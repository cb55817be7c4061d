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

// TestTasksTooLargeForNATSFailTheirWorkflowNotTheShard: a workflow whose
// history outgrows what NATS carries (three signals of 400 kB each) fails
// with WorkflowTaskTooLarge instead of leaving a task the scheduler can
// never publish, which used to stop its whole shard; a workflow task whose
// decisions are too large to report fails its workflow on the worker the
// same way, instead of being handed back for ever. The shard goes on: an
// ordinary start completes.
func TestTasksTooLargeForNATSFailTheirWorkflowNotTheShard(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "double", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "echo_text", in+in).Get(&out)
			return out, err
		})
		harvest.RegisterActivity(w, "echo_text", func(_ *harvest.ActivityContext, in string) (string, error) { return in, nil })
	}})

	st := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/collect/start", nil, `{"input": {"count": 5}}`)
	require.Equal(t, 201, st.Status, st.Body)
	collector := st.Body["execution_id"].(string)
	big := strings.Repeat("a", 400_000)
	for i := range 3 {
		r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/"+collector+"/signal/item", map[string]string{"Idempotency-Key": fmt.Sprint("big-", i)},
			`"`+big+`"`)
		require.Contains(t, []int{202, 409}, r.Status, r.Body) // 409 once it has failed
	}
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
	failedWith(collector, "WorkflowTaskTooLarge")

	st = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/double/start", nil, `{"input": "`+strings.Repeat("b", 600_000)+`"}`)
	require.Equal(t, 201, st.Status, st.Body)
	failedWith(st.Body["execution_id"].(string), "WorkflowTaskTooLarge")

	st = stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "after-big"}, `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 201, st.Status, st.Body)
	stacktest.WaitCompleted(t, s, st.Body["execution_id"].(string))
}
