package workerrt_test

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestOnceRunsAnEffectOncePerKey(t *testing.T) {
	t.Parallel()
	var runs, flakyRuns atomic.Int32
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		// Five executions share one effect key: the effect runs once, and
		// every caller gets its recorded result.
		harvest.RegisterActivity(w, "send_once", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			return harvest.Once(ctx, harvest.ActivityKey("welcome-email-42"), func(context.Context) (string, error) {
				return fmt.Sprintf("sent-%d", runs.Add(1)), nil
			})
		})
		// A failed effect is not recorded: the retry runs it again.
		harvest.RegisterActivity(w, "flaky_once", func(ctx *harvest.ActivityContext, _ struct{}) (string, error) {
			return harvest.Once(ctx, ctx.IdempotencyKey().Subkey("effect"), func(context.Context) (string, error) {
				if flakyRuns.Add(1) == 1 {
					return "", errors.New("downstream hiccup")
				}
				return "done", nil
			})
		}, harvest.ActivityOptions{RetryPolicy: harvest.RetryExponential(3, 50_000_000)})
		for _, act := range []string{"send_once", "flaky_once"} {
			harvest.RegisterWorkflow(w, "wf_"+act, func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				var out string
				return out, harvest.ExecuteActivity(ctx, act, nil).Get(&out)
			})
		}
	}})
	var ids []string
	for range 5 {
		ids = append(ids, stacktest.StartWorkflow(t, s, "wf_send_once", "", `{}`).Body["execution_id"].(string))
	}
	for _, id := range ids {
		require.Equal(t, "sent-1", stacktest.WaitCompleted(t, s, id)["result"])
	}
	require.EqualValues(t, 1, runs.Load())

	flaky := stacktest.StartWorkflow(t, s, "wf_flaky_once", "", `{}`).Body["execution_id"].(string)
	require.Equal(t, "done", stacktest.WaitCompleted(t, s, flaky)["result"])
	require.EqualValues(t, 2, flakyRuns.Load())
}

func TestEveryInvocationGetsItsOwnKey(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "key_of", func(ctx *harvest.ActivityContext, _ string) (string, error) {
			return ctx.IdempotencyKey().String(), nil
		})
		// The same activity with the same input, twice in one workflow.
		harvest.RegisterWorkflow(w, "two_keys", func(ctx *harvest.WorkflowContext, _ struct{}) ([]string, error) {
			var a, b string
			if err := harvest.ExecuteActivity(ctx, "key_of", "same").Get(&a); err != nil {
				return nil, err
			}
			if err := harvest.ExecuteActivity(ctx, "key_of", "same").Get(&b); err != nil {
				return nil, err
			}
			return []string{a, b}, nil
		})
	}})
	id := stacktest.StartWorkflow(t, s, "two_keys", "", `{}`).Body["execution_id"].(string)
	keys := stacktest.WaitCompleted(t, s, id)["result"].([]any)
	require.Len(t, keys, 2)
	require.NotEqual(t, keys[0], keys[1])
	// Each key is the one its ActivityScheduled event recorded.
	h := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id+"/history", nil, "")
	var recorded []any
	for _, e := range h.Body["events"].([]any) {
		if ev := e.(map[string]any); ev["type"] == "ActivityScheduled" {
			recorded = append(recorded, ev["idempotency_key"])
		}
	}
	require.Equal(t, keys, recorded)
}
