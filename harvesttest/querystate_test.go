package harvesttest_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// progress is the query state the progress workflow sets.
type progress struct {
	Count int `json:"count"`
	Sum   int `json:"sum"`
}

// registerProgress registers progress: it sets its state "phase" once
// when it starts and once when it ends, and "progress" after each of the
// 4 signals "n" it takes, from a goroutine of its own for the last two.
func registerProgress(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "progress", func(ctx *harvest.WorkflowContext, _ struct{}) (progress, error) {
		var p progress
		if err := harvest.SetQueryState(ctx, "phase", "collecting"); err != nil {
			return p, err
		}
		take := func() error {
			v, err := harvest.NewSignal[int]("n").Receive(ctx)
			if err != nil {
				return err
			}
			p.Count++
			p.Sum += v
			return harvest.SetQueryState(ctx, "progress", p)
		}
		for range 2 {
			if err := take(); err != nil {
				return p, err
			}
		}
		done := false
		var err error
		harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {
			for range 2 {
				if err = take(); err != nil {
					break
				}
			}
			done = true
		})
		if err := harvest.Await(ctx, func() bool { return done }); err != nil {
			return p, err
		}
		if err != nil {
			return p, err
		}
		return p, harvest.SetQueryState(ctx, "phase", "done")
	})
}

// lastTaskSeq is the seq of the last WorkflowTaskCompleted of x's history.
func lastTaskSeq(t *testing.T, x *harvesttest.Execution) int {
	t.Helper()
	events, err := x.History()
	require.NoError(t, err)
	seq := 0
	for _, ev := range events {
		require.NotContains(t, strings.ToLower(ev.Type), "state", "a query state is no history")
		if ev.Type == "WorkflowTaskCompleted" {
			seq = ev.Seq
		}
	}
	return seq
}

// TestAQueryStateIsTheLastValueItsCodeSet: after each signal, progress's
// state is the value the task that took it set, at the seq of that
// task's WorkflowTaskCompleted, growing; a state the code has not set is
// not found, and every state is still read once the execution completed.
// The same holds with the worker's cache on, off, and evicting at every
// task (two executions, one place), where every task replays afresh and
// sends every state again; the histories replay.
func TestAQueryStateIsTheLastValueItsCodeSet(t *testing.T) {
	t.Parallel()
	for _, size := range []int{0, -1, 1} {
		t.Run(fmt.Sprint("cache ", size), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env, err := harvesttest.New(registerProgress, harvesttest.Config{WorkflowCacheSize: size})
			require.NoError(t, err)
			t.Cleanup(env.Close)
			var xs []*harvesttest.Execution
			for range 2 {
				x, err := env.Start(ctx, "progress", struct{}{})
				require.NoError(t, err)
				xs = append(xs, x)
			}
			for _, x := range xs {
				phase, err := x.State("phase")
				require.NoError(t, err)
				require.JSONEq(t, `"collecting"`, string(phase.Value))
				require.Equal(t, lastTaskSeq(t, x), phase.Seq)
				require.Equal(t, client.StatusRunning, phase.Status)
				_, err = x.State("progress")
				require.ErrorIs(t, err, client.ErrStateNotFound, "not set before the first signal")
				require.NotErrorIs(t, err, client.ErrExecutionNotFound)
			}
			prev := make([]int, len(xs))
			for i := range 4 {
				for j, x := range xs {
					_, err := x.Signal(ctx, "n", 10*(j+1)+i)
					require.NoError(t, err)
					st, err := x.State("progress")
					require.NoError(t, err)
					want := progress{Count: i + 1}
					for k := range i + 1 {
						want.Sum += 10*(j+1) + k
					}
					require.JSONEq(t, fmt.Sprintf(`{"count": %d, "sum": %d}`, want.Count, want.Sum), string(st.Value), "signal %d", i)
					require.Equal(t, lastTaskSeq(t, x), st.Seq, "the seq of the task that set it")
					require.Greater(t, st.Seq, prev[j])
					prev[j] = st.Seq
				}
			}
			for _, x := range xs {
				var res progress
				require.NoError(t, x.Result(&res))
				require.Equal(t, 4, res.Count)
				phase, err := x.State("phase")
				require.NoError(t, err)
				require.JSONEq(t, `"done"`, string(phase.Value))
				require.Equal(t, client.StatusCompleted, phase.Status)
				st, err := x.State("progress")
				require.NoError(t, err)
				require.Contains(t, string(st.Value), `"count":4`)
				require.NoError(t, x.Replay(nil))
			}
			_, err = env.Execution("01a2398e-0000-7000-8000-000000000000").State("phase")
			require.ErrorIs(t, err, client.ErrExecutionNotFound)
		})
	}
}

// TestOnlyTheStatesATaskChangedTravelWithIt: a worker that holds the
// execution in its cache sends only what changed, so a state set once
// keeps the seq of the task that set it; with the cache off, every task
// replays afresh and sends it again, at its own seq (harmless: the value
// is the same).
func TestOnlyTheStatesATaskChangedTravelWithIt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	for _, tc := range []struct {
		size  int
		moves bool
	}{{0, false}, {-1, true}} {
		env, err := harvesttest.New(registerProgress, harvesttest.Config{WorkflowCacheSize: tc.size})
		require.NoError(t, err)
		t.Cleanup(env.Close)
		x, err := env.Start(ctx, "progress", struct{}{})
		require.NoError(t, err)
		first := lastTaskSeq(t, x)
		_, err = x.Signal(ctx, "n", 1)
		require.NoError(t, err)
		phase, err := x.State("phase")
		require.NoError(t, err)
		require.JSONEq(t, `"collecting"`, string(phase.Value))
		if tc.moves {
			require.Equal(t, lastTaskSeq(t, x), phase.Seq, "cache %d: sent again", tc.size)
		} else {
			require.Equal(t, first, phase.Seq, "cache %d: unchanged, not sent", tc.size)
		}
	}
}

// TestAQueryStateThatCannotBeStoredIsRefused: SetQueryState refuses a
// name that is no name, a value that does not encode, one larger than
// MaxQueryStateBytes and one PostgreSQL cannot store, each with an error
// matching ErrInvalidQueryState, and the state keeps its value.
func TestAQueryStateThatCannotBeStoredIsRefused(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "refused", func(ctx *harvest.WorkflowContext, _ struct{}) ([]string, error) {
			if err := harvest.SetQueryState(ctx, "s", "kept"); err != nil {
				return nil, err
			}
			var out []string
			for _, c := range []struct {
				name  string
				value any
			}{
				{"no.dots", 1},
				{"", 1},
				{"s", make(chan int)},
				{"s", strings.Repeat("x", harvest.MaxQueryStateBytes)},
				{"s", "nul \x00"},
			} {
				err := harvest.SetQueryState(ctx, c.name, c.value)
				out = append(out, fmt.Sprintf("%v", errors.Is(err, harvest.ErrInvalidQueryState)))
			}
			// Exactly at the limit is taken.
			atLimit := strings.Repeat("x", harvest.MaxQueryStateBytes-2)
			if err := harvest.SetQueryState(ctx, "big", atLimit); err != nil {
				return nil, err
			}
			return out, nil
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	x, err := env.Start(ctx, "refused", struct{}{})
	require.NoError(t, err)
	var out []string
	require.NoError(t, x.Result(&out))
	require.Equal(t, []string{"true", "true", "true", "true", "true"}, out)
	st, err := x.State("s")
	require.NoError(t, err)
	require.JSONEq(t, `"kept"`, string(st.Value))
	big, err := x.State("big")
	require.NoError(t, err)
	require.Len(t, big.Value, harvest.MaxQueryStateBytes)
}
