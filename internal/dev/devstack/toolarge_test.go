package devstack_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
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
	s := startStack(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "double", func(ctx *harvest.WorkflowContext, in string) (string, error) {
			var out string
			err := harvest.ExecuteActivity(ctx, "echo_text", in+in).Get(&out)
			return out, err
		})
		harvest.RegisterActivity(w, "echo_text", func(_ *harvest.ActivityContext, in string) (string, error) { return in, nil })
	}})

	st := call(t, "POST", s.URL()+"/api/harvest/workflows/collect/start", nil, `{"input": {"count": 5}}`)
	require.Equal(t, 201, st.status, st.body)
	collector := st.body["execution_id"].(string)
	big := strings.Repeat("a", 400_000)
	for i := range 3 {
		r := call(t, "POST", s.URL()+"/api/harvest/workflows/"+collector+"/signal/item", map[string]string{"Idempotency-Key": fmt.Sprint("big-", i)},
			`"`+big+`"`)
		require.Contains(t, []int{202, 409}, r.status, r.body) // 409 once it has failed
	}
	failedWith := func(id, typ string) {
		t.Helper()
		var exec answer
		eventually(t, 60*time.Second, "execution "+id+" to fail", func() bool {
			exec = call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "")
			return exec.status == 200 && exec.body["status"] == "Failed"
		})
		raw, err := json.Marshal(exec.body["error"])
		require.NoError(t, err)
		require.Contains(t, string(raw), typ)
	}
	failedWith(collector, "WorkflowTaskTooLarge")

	st = call(t, "POST", s.URL()+"/api/harvest/workflows/double/start", nil, `{"input": "`+strings.Repeat("b", 600_000)+`"}`)
	require.Equal(t, 201, st.status, st.body)
	failedWith(st.body["execution_id"].(string), "WorkflowTaskTooLarge")

	st = call(t, "POST", s.URL()+"/api/harvest/workflows/charge/start", map[string]string{"Idempotency-Key": "after-big"}, `{`+chargeInput+`}`)
	require.Equal(t, 201, st.status, st.body)
	waitCompleted(t, s, st.body["execution_id"].(string))
}
