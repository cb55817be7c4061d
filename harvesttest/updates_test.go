package harvesttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// registerCart registers cart: it takes add_item updates (refusing
// empty items and more than limit), answers each with the cart's size
// after an activity prices the item, and returns the cart once it gets
// the checkout signal.
func registerCart(w *harvest.Worker) {
	harvest.RegisterActivity(w, "price", func(_ *harvest.ActivityContext, item string) (int, error) { return len(item), nil })
	harvest.RegisterWorkflow(w, "cart", func(ctx *harvest.WorkflowContext, limit int) ([]string, error) {
		var items []string
		total := 0
		err := harvest.SetUpdateHandler(ctx, "add_item", func(ctx *harvest.WorkflowContext, item string) (int, error) {
			var price int
			if err := harvest.ExecuteActivity(ctx, "price", item).Get(&price); err != nil {
				return 0, err
			}
			items = append(items, item)
			total += price
			return len(items), nil
		}, harvest.UpdateOptions{Validator: func(item string) error {
			switch {
			case item == "":
				return errors.New("an item needs a name")
			case len(items) >= limit:
				return fmt.Errorf("the cart is full (%d items)", limit)
			}
			return nil
		}})
		if err != nil {
			return nil, err
		}
		if err := harvest.NewSignal[struct{}]("checkout").Channel(ctx).Receive(nil); err != nil {
			return nil, err
		}
		return items, nil
	})
}

// TestAnUpdateIsAnsweredByItsHandler: accepted updates run their
// handlers, which may run activities; a refused one writes nothing to
// the history; a key asked again is the same update; an update of a
// closed execution is 409.
func TestAnUpdateIsAnsweredByItsHandler(t *testing.T) {
	t.Parallel()
	for _, size := range []int{-1, 1, 0} { // the cache off, evicting, on
		t.Run(fmt.Sprint("cache ", size), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			env, err := harvesttest.New(registerCart, harvesttest.Config{WorkflowCacheSize: size})
			require.NoError(t, err)
			defer env.Close()
			x, err := env.Start(ctx, "cart", 2)
			require.NoError(t, err)
			other, err := env.Start(ctx, "cart", 2) // keeps a size-1 cache evicting
			require.NoError(t, err)

			u, err := x.Update(ctx, "add_item", "apple", harvesttest.UpdateOptions{IdempotencyKey: "k1"})
			require.NoError(t, err)
			require.Equal(t, client.UpdateCompleted, u.Status)
			require.JSONEq(t, `1`, string(u.Result))
			_, err = other.Update(ctx, "add_item", "kiwi")
			require.NoError(t, err)

			before, err := x.History()
			require.NoError(t, err)
			_, err = x.Update(ctx, "add_item", "")
			require.ErrorIs(t, err, client.ErrUpdateRejected)
			require.ErrorContains(t, err, "an item needs a name")
			_, err = x.Update(ctx, "remove_item", "apple")
			require.ErrorIs(t, err, client.ErrUpdateNotFound)
			after, err := x.History()
			require.NoError(t, err)
			require.Len(t, after, len(before), "a refused update writes nothing to the history")

			again, err := x.Update(ctx, "add_item", "pear", harvesttest.UpdateOptions{IdempotencyKey: "k1"})
			require.NoError(t, err)
			require.True(t, again.Deduplicated)
			require.Equal(t, u.UpdateID, again.UpdateID)
			require.JSONEq(t, `1`, string(again.Result), "the first request's answer")

			u2, err := x.Update(ctx, "add_item", "banana")
			require.NoError(t, err)
			require.JSONEq(t, `2`, string(u2.Result))
			_, err = x.Update(ctx, "add_item", "cherry")
			require.ErrorIs(t, err, client.ErrUpdateRejected)
			require.ErrorContains(t, err, "the cart is full")

			_, err = x.Signal(ctx, "checkout", nil)
			require.NoError(t, err)
			var items []string
			require.NoError(t, x.Result(&items))
			require.Equal(t, []string{"apple", "banana"}, items)
			_, err = x.Update(ctx, "add_item", "late")
			require.ErrorIs(t, err, client.ErrExecutionClosed)

			// The history replays on fresh code.
			require.NoError(t, x.Replay(registerCart))
			hist, err := x.History()
			require.NoError(t, err)
			var accepted, completed int
			for _, ev := range hist {
				switch ev.Type {
				case "WorkflowUpdateAccepted":
					accepted++
				case "WorkflowUpdateCompleted":
					completed++
				}
			}
			require.Equal(t, 2, accepted)
			require.Equal(t, 2, completed)
		})
	}
}

// TestAnUpdateInFlightFailsWhenItsExecutionCloses: an update whose
// handler waits when the workflow returns is answered execution_closed.
func TestAnUpdateInFlightFailsWhenItsExecutionCloses(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "slow", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.SetUpdateHandler(ctx, "wait", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				_ = harvest.Sleep(ctx, time.Hour)
				return "woke", nil
			}); err != nil {
				return "", err
			}
			_ = harvest.Sleep(ctx, time.Minute)
			return "done", nil
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "slow", struct{}{})
	require.NoError(t, err)
	u, err := x.Update(ctx, "wait", struct{}{})
	require.NoError(t, err)
	require.Equal(t, client.UpdateAccepted, u.Status)
	require.NoError(t, env.Advance(ctx, time.Minute))
	require.NoError(t, x.Result(nil))
	_, err = x.UpdateStatus(u.UpdateID)
	require.ErrorIs(t, err, client.ErrExecutionClosed)
}

// TestUpdatesAreLimitedPerRun: past update_max_in_flight the API answers
// 429 update_limit.
func TestUpdatesAreLimitedPerRun(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "hold", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.SetUpdateHandler(ctx, "wait", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				_ = harvest.Sleep(ctx, time.Hour)
				return "woke", nil
			}); err != nil {
				return "", err
			}
			_ = harvest.Sleep(ctx, 2*time.Hour)
			return "done", nil
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "hold", struct{}{})
	require.NoError(t, err)
	for range 10 {
		_, err := x.Update(ctx, "wait", struct{}{})
		require.NoError(t, err)
	}
	_, err = x.Update(ctx, "wait", struct{}{})
	require.ErrorIs(t, err, client.ErrUpdateLimit)
	require.NoError(t, env.Advance(ctx, time.Hour))
	u, err := x.Update(ctx, "wait", struct{}{})
	require.NoError(t, err, "the updates answered leave room")
	require.Equal(t, client.UpdateAccepted, u.Status)
	var raw json.RawMessage
	require.NoError(t, env.Advance(ctx, 2*time.Hour))
	require.NoError(t, x.Result(&raw))
}

// TestAnUpdateAnswerPostgreSQLCannotStoreFails: a handler's result
// holding U+0000 is the update's failure, said plainly, not a workflow
// task the scheduler cannot record; so is an error whose text holds one,
// with the NUL replaced.
func TestAnUpdateAnswerPostgreSQLCannotStoreFails(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	env, err := harvesttest.New(func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "nul", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.SetUpdateHandler(ctx, "echo", func(_ *harvest.WorkflowContext, s string) (string, error) {
				if s == "fail" {
					return "", errors.New("bad\x00byte")
				}
				return s + "\x00", nil
			}); err != nil {
				return "", err
			}
			_ = harvest.Sleep(ctx, time.Hour)
			return "done", nil
		})
	}, harvesttest.Config{})
	require.NoError(t, err)
	defer env.Close()
	x, err := env.Start(ctx, "nul", struct{}{})
	require.NoError(t, err)
	u, err := x.Update(ctx, "echo", "a")
	require.NoError(t, err)
	require.Equal(t, client.UpdateFailed, u.Status)
	require.Contains(t, string(u.Failure), "which Harvest cannot store")
	u, err = x.Update(ctx, "echo", "fail")
	require.NoError(t, err)
	require.Equal(t, client.UpdateFailed, u.Status)
	require.Contains(t, string(u.Failure), "bad\uFFFDbyte")
	require.NoError(t, env.Advance(ctx, time.Hour))
	require.NoError(t, x.Result(nil))
}
