package harvesttest_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/harvesttest"
)

// registerMixed registers mixed: for each of n signals it draws a side
// effect, runs an activity, sleeps on every other one and goes through a
// version change, then returns what it added up.
func registerMixed(w *harvest.Worker) {
	harvest.RegisterActivity(w, "double", func(_ *harvest.ActivityContext, n int) (int, error) { return 2 * n, nil })
	harvest.RegisterWorkflow(w, "mixed", func(ctx *harvest.WorkflowContext, n int) (int, error) {
		total := 0
		for i := range n {
			v, err := harvest.NewSignal[int]("n").Receive(ctx)
			if err != nil {
				return 0, err
			}
			v += harvest.SideEffect(ctx, func() int { return i * 100 })
			var doubled int
			if err := harvest.ExecuteActivity(ctx, "double", v).Get(&doubled); err != nil {
				return 0, err
			}
			total += doubled
			if i%2 == 0 {
				_ = harvest.Sleep(ctx, time.Minute)
			}
			if harvest.GetVersion(ctx, fmt.Sprint("step-", i), harvest.DefaultVersion, 1) == 1 {
				total++
			}
		}
		return total, nil
	})
}

// activityKey matches an activity's idempotency key, derived from its
// execution's id, which each run mints anew.
var activityKey = regexp.MustCompile(`"idempotency_key":"[^"]*"`)

// TestTheWorkflowCacheChangesNothing: the same executions, driven the
// same way, record the same histories and results whether the worker
// keeps executions between their tasks (the default), keeps none (every
// task replays the history it fetches), or keeps one while three run
// (each task evicts another's).
func TestTheWorkflowCacheChangesNothing(t *testing.T) {
	t.Parallel()
	run := func(size int) []string {
		t.Helper()
		ctx := context.Background()
		env, err := harvesttest.New(registerMixed, harvesttest.Config{WorkflowCacheSize: size})
		require.NoError(t, err)
		defer env.Close()
		var xs []*harvesttest.Execution
		for i := range 3 {
			x, err := env.Start(ctx, "mixed", 6, harvesttest.StartOptions{WorkflowID: fmt.Sprint("mixed-", i)})
			require.NoError(t, err)
			xs = append(xs, x)
		}
		for i := range 6 {
			for j, x := range xs {
				_, err := x.Signal(ctx, "n", 10*i+j)
				require.NoError(t, err)
			}
			require.NoError(t, env.Advance(ctx, time.Minute))
		}
		var out []string
		for _, x := range xs {
			var total int
			require.NoError(t, x.Result(&total), "cache size %d", size)
			events, err := x.History()
			require.NoError(t, err)
			lines := []string{fmt.Sprint("result ", total)}
			for _, ev := range events {
				attrs, err := json.Marshal(ev.Attrs)
				require.NoError(t, err)
				lines = append(lines, fmt.Sprintf("%d %s %s %s", ev.Seq, ev.At.Format(time.RFC3339Nano), ev.Type, activityKey.ReplaceAllString(string(attrs), `"idempotency_key":"<derived from the execution id>"`)))
			}
			out = append(out, strings.Join(lines, "\n"))
		}
		return out
	}
	cached := run(0)
	require.Equal(t, cached, run(-1), "no cache")
	require.Equal(t, cached, run(1), "a cache of one, evicting")
}
