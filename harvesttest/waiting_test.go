package harvesttest_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// registerGate registers gate: its function waits for the signal
// "approve", then for a condition of at most 30 minutes; a goroutine of
// its own selects between the signal "stop" and an hour's timer, and
// stopping meets the condition.
func registerGate(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "gate", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
		stopped := false
		harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {
			harvest.NewSelector(ctx).
				AddReceive(harvest.GetSignalChannel(ctx, "stop"), func(c *harvest.SignalChannel) { _ = c.Receive(nil) }).
				AddTimer(harvest.NewTimer(ctx, time.Hour), func(*harvest.Timer) {}).
				Select()
			stopped = true
		})
		if _, err := harvest.NewSignal[string]("approve").Receive(ctx); err != nil {
			return "", err
		}
		ok, err := harvest.AwaitWithTimeout(ctx, 30*time.Minute, func() bool { return stopped })
		return fmt.Sprint("stopped ", ok), err
	})
}

// TestDescribeSaysWhatTheCodeWaitsFor: describe's waiting_on names each
// blocked goroutine's call, as the last task left it: a signal by name,
// a selector's cases (a signal and a timer with when it fires), a
// condition with its timeout. A signal no code receives changes no wait,
// and the waits then hold as of its task, whether the worker's cache
// kept the execution (and sent nothing) or replayed it afresh (and sent
// them again). A closed execution waits for nothing.
func TestDescribeSaysWhatTheCodeWaitsFor(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, -1} {
		t.Run(fmt.Sprint("cache ", size), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env, err := harvesttest.New(registerGate, harvesttest.Config{WorkflowCacheSize: size})
			require.NoError(t, err)
			t.Cleanup(env.Close)
			started := env.Now()
			x, err := env.Start(ctx, "gate", struct{}{})
			require.NoError(t, err)

			waiting := func() *client.Waiting {
				t.Helper()
				d, err := x.Describe()
				require.NoError(t, err)
				require.NotNil(t, d.WaitingOn, "a running execution says what it waits for")
				return d.WaitingOn
			}
			w := waiting()
			require.Equal(t, lastTaskSeq(t, x), w.Seq)
			require.Len(t, w.Waits, 2)
			require.Equal(t, client.Wait{Goroutine: "workflow function", WaitCase: client.WaitCase{Kind: "signal", Name: "approve"}}, w.Waits[0])
			sel := w.Waits[1]
			require.Equal(t, "workflow goroutine 1", sel.Goroutine)
			require.Equal(t, "selector", sel.Kind)
			require.Len(t, sel.Cases, 2)
			require.Equal(t, client.WaitCase{Kind: "signal", Name: "stop"}, sel.Cases[0])
			require.Equal(t, "timer", sel.Cases[1].Kind)
			require.Equal(t, 1, sel.Cases[1].ID)
			require.NotNil(t, sel.Cases[1].Until)
			require.WithinDuration(t, started.Add(time.Hour), *sel.Cases[1].Until, time.Minute)

			// A signal no code receives: the waits do not change.
			_, err = x.Signal(ctx, "noise", 1)
			require.NoError(t, err)
			again := waiting()
			require.Equal(t, w.Waits, again.Waits)
			require.Greater(t, again.Seq, w.Seq)
			require.Equal(t, lastTaskSeq(t, x), again.Seq, "they hold as of the last task, sent again or not")

			_, err = x.Signal(ctx, "approve", "yes")
			require.NoError(t, err)
			w = waiting()
			require.Equal(t, lastTaskSeq(t, x), w.Seq)
			require.Len(t, w.Waits, 2)
			require.Equal(t, sel, w.Waits[1], "in the order the goroutines started")
			cond := w.Waits[0]
			require.Equal(t, "workflow function", cond.Goroutine)
			require.Equal(t, "condition", cond.Kind)
			require.NotNil(t, cond.Until, "AwaitWithTimeout's timeout")
			require.WithinDuration(t, started.Add(30*time.Minute), *cond.Until, time.Minute)

			_, err = x.Signal(ctx, "stop", nil)
			require.NoError(t, err)
			var res string
			require.NoError(t, x.Result(&res))
			require.Equal(t, "stopped true", res)
			d, err := x.Describe()
			require.NoError(t, err)
			require.Nil(t, d.WaitingOn, "a closed execution waits for nothing")
			require.NoError(t, x.Replay(nil))
		})
	}
}
