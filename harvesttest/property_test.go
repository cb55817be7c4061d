package harvesttest_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/harvesttest"
)

// A property of the SDK: whatever a workflow does with the SDK's calls,
// and wherever the history puts its workflow tasks' boundaries (signals
// and results arriving between them, timers firing, results lost, the
// worker restarting), every replay decides as the first run did.
//
// The workflows are programs of random steps, each using the SDK's
// calls the way workflow code does; each step notes what it saw, and the
// notes are the workflow's result. The test runs each program on an Env
// while it sends signals, moves the clock and injects faults at random,
// then replays every workflow task the execution completed.

// step is one step of a random workflow program.
type step struct {
	Kind string `json:"kind"`
	N    int    `json:"n"`
}

// sideEffects makes SideEffect's value differ on every call: only the
// recorded one may come back.
var sideEffects atomic.Int64

// program interprets its steps with the SDK's calls.
func program(ctx *harvest.WorkflowContext, steps []step) ([]string, error) {
	var notes []string
	note := func(format string, args ...any) { notes = append(notes, fmt.Sprintf(format, args...)) }
	signals := harvest.GetSignalChannel(ctx, "s")
	received := 0
	start := harvest.Now(ctx)
	for i, s := range steps {
		switch s.Kind {
		case "act":
			var v int
			if err := harvest.ExecuteActivity(ctx, "echo", s.N).Get(&v); err != nil {
				return nil, err
			}
			note("act %d", v)
		case "slow":
			// An activity that succeeds at its second attempt, s.N ms
			// later; whether it is done after a sleep depends on when
			// the history has it.
			slow := harvest.ExecuteActivity(ctx, "slow", s.N, harvest.ActivityOptions{RetryPolicy: &harvest.RetryPolicy{
				MaximumAttempts: 2, InitialInterval: time.Duration(s.N) * time.Millisecond, BackoffCoefficient: 1}})
			_ = harvest.Sleep(ctx, 500*time.Millisecond)
			note("slow ready %v", slow.IsReady())
			if !slow.IsReady() {
				if err := harvest.ExecuteActivity(ctx, "echo", -i).Get(nil); err != nil {
					return nil, err
				}
			}
			if err := slow.Get(nil); err != nil {
				return nil, err
			}
		case "select":
			timer := harvest.NewTimer(ctx, time.Duration(s.N)*time.Millisecond)
			harvest.NewSelector(ctx).
				AddReceive(signals, func(c *harvest.SignalChannel) {
					var v int
					_ = c.Receive(&v)
					received++
					timer.Cancel()
					note("select signal %d", v)
				}).
				AddTimer(timer, func(*harvest.Timer) { note("select timer") }).
				Select()
		case "poll":
			var v int
			ok, err := signals.ReceiveAsync(&v)
			if err != nil {
				return nil, err
			}
			if ok {
				received++
			}
			note("poll %v %d", ok, v)
		case "default":
			harvest.NewSelector(ctx).
				AddReceive(signals, func(c *harvest.SignalChannel) { _ = c.Receive(nil); received++; note("default signal") }).
				AddDefault(func() { note("default none") }).
				Select()
		case "side":
			note("side %d", harvest.SideEffect(ctx, func() int64 { return sideEffects.Add(1) }))
		case "go":
			results := harvest.NewChannel[int](ctx)
			for j := range s.N {
				harvest.Go(ctx, func(ctx *harvest.WorkflowContext) {
					var v int
					_ = harvest.ExecuteActivity(ctx, "echo", 100*i+j).Get(&v)
					results.Send(ctx, v)
				})
			}
			for range s.N {
				v, _ := results.Receive(ctx)
				note("go %d", v)
			}
		case "await":
			ok, _ := harvest.AwaitWithTimeout(ctx, time.Duration(s.N)*time.Millisecond, signals.HasPending)
			if ok {
				_ = signals.Receive(nil)
				received++
			}
			note("await %v", ok)
		case "now":
			note("now +%s", harvest.Now(ctx).Sub(start))
		case "sleep":
			_ = harvest.Sleep(ctx, time.Duration(s.N)*time.Millisecond)
		}
	}
	return notes, nil
}

func registerProgram(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "program", program)
	harvest.RegisterActivity(w, "echo", func(_ *harvest.ActivityContext, n int) (int, error) { return n, nil })
	harvest.RegisterActivity(w, "slow", func(ctx *harvest.ActivityContext, n int) (int, error) {
		if ctx.Attempt() == 1 {
			return 0, errors.New("not yet")
		}
		return n, nil
	})
}

var stepKinds = []string{"act", "slow", "select", "poll", "default", "side", "go", "await", "now", "sleep"}

func randomProgram(rng *rand.Rand) []step {
	steps := make([]step, 3+rng.IntN(8))
	for i := range steps {
		steps[i] = step{Kind: stepKinds[rng.IntN(len(stepKinds))], N: 1 + rng.IntN(2000)}
		if steps[i].Kind == "go" {
			steps[i].N = 1 + rng.IntN(3)
		}
	}
	return steps
}

// TestEveryReplayDecidesAsTheFirstRun runs random programs under random
// boundaries and faults, then replays each execution's workflow tasks.
func TestEveryReplayDecidesAsTheFirstRun(t *testing.T) {
	t.Parallel()
	seed := uint64(time.Now().UnixNano())
	const programs = 40
	for i := range programs {
		s := seed + uint64(i)
		t.Run(strconv.FormatUint(s, 10), func(t *testing.T) {
			rng := rand.New(rand.NewPCG(s, 29))
			steps := randomProgram(rng)
			ctx := context.Background()
			// Half the programs run their activities concurrently, as a
			// deployment does.
			concurrent := rng.IntN(2) == 0
			env, err := harvesttest.New(registerProgram, harvesttest.Config{ConcurrentActivities: concurrent})
			require.NoError(t, err)
			t.Cleanup(env.Close)
			x, err := env.Start(ctx, "program", steps)
			require.NoError(t, err)
			for range 40 {
				if status, err := x.Status(); err != nil || status != "Running" {
					break
				}
				switch rng.IntN(6) {
				case 0, 1:
					_, err = x.Signal(ctx, "s", rng.IntN(1000))
				case 2:
					env.Inject(harvesttest.LoseWorkflowTaskResult("program"))
				case 3:
					err = env.RestartWorker(ctx, nil)
				default:
					err = env.Advance(ctx, time.Duration(rng.IntN(1500))*time.Millisecond)
				}
				require.NoError(t, err)
				require.NoError(t, env.Settle(ctx))
			}
			// Then time runs on until the program is done (the selects
			// and waits end on their timers).
			for range 100 {
				if status, err := x.Status(); err != nil || status != "Running" {
					break
				}
				require.NoError(t, env.Advance(ctx, time.Second))
				require.NoError(t, env.Settle(ctx))
			}
			var notes []string
			require.NoError(t, x.Result(&notes), "program %v", steps)
			require.NoError(t, x.Replay(nil), "program %v, notes %v", steps, notes)
		})
	}
}
