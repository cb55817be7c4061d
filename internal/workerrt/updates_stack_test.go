package workerrt_test

import (
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// registerBasket registers basket: add_item updates (refused when empty),
// each answered with the basket's size once an activity priced the item;
// slow updates, answered after a minute; done, a signal that returns
// the basket.
func registerBasket(w *harvest.Worker) {
	harvest.RegisterActivity(w, "price", func(_ *harvest.ActivityContext, item string) (int, error) { return len(item), nil })
	harvest.RegisterWorkflow(w, "basket", func(ctx *harvest.WorkflowContext, _ struct{}) ([]string, error) {
		var items []string
		if err := harvest.SetUpdateHandler(ctx, "add_item", func(ctx *harvest.WorkflowContext, item string) (int, error) {
			if err := harvest.ExecuteActivity(ctx, "price", item).Get(nil); err != nil {
				return 0, err
			}
			items = append(items, item)
			return len(items), nil
		}, harvest.UpdateOptions{Validator: func(_ *harvest.WorkflowContext, item string) error {
			if item == "" {
				return errors.New("an item needs a name")
			}
			return nil
		}}); err != nil {
			return nil, err
		}
		if err := harvest.SetUpdateHandler(ctx, "slow", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			_ = harvest.Sleep(ctx, time.Minute)
			return "slept", nil
		}); err != nil {
			return nil, err
		}
		if err := harvest.NewSignal[struct{}]("done").Channel(ctx).Receive(nil); err != nil {
			return nil, err
		}
		return items, nil
	})
}

// TestUpdatesOnPostgreSQL: through the API, an update is answered with
// its handler's result; the same Idempotency-Key, sent again or at once
// from several clients, is one update; a validator's refusal is 422
// update_rejected and writes nothing to the history; an unknown name is
// 404; wait=accepted answers 202, and GET ?wait= reads the answer; bad
// input gets its code; a closed execution's update is 409, and an update
// in flight as it closes fails execution_closed.
func TestUpdatesOnPostgreSQL(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Register: registerBasket})
	c, ctx := stacktest.Client(t, s)
	res, err := c.Start(ctx, "basket", struct{}{}, client.StartOptions{WorkflowID: "basket-1"})
	require.NoError(t, err)
	id := res.ExecutionID
	updates := s.URL() + "/api/harvest/executions/" + id + "/updates/"
	post := func(name, key, query, body string) stacktest.Answer {
		t.Helper()
		hdr := map[string]string{}
		if key != "" {
			hdr["Idempotency-Key"] = key
		}
		return stacktest.Call(t, "POST", updates+name+query, hdr, body)
	}

	a := post("add_item", "u-1", "", `"apple"`)
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, "completed", a.Body["status"])
	require.EqualValues(t, 1, a.Body["result"])
	first := a.Body["update_id"].(string)
	a = post("add_item", "u-1", "", `"pear"`)
	require.Equal(t, http.StatusOK, a.Status, a.Body)
	require.Equal(t, first, a.Body["update_id"])
	require.Equal(t, true, a.Body["deduplicated"])
	require.EqualValues(t, 1, a.Body["result"], "the first request's answer")

	// One key from eight clients at once: one update.
	var wg sync.WaitGroup
	ids := make([]string, 8)
	for i := range ids {
		wg.Go(func() {
			u, err := c.Update(ctx, id, "add_item", "fig", client.UpdateOptions{IdempotencyKey: "u-2"})
			if err == nil {
				ids[i] = u.UpdateID
			}
		})
	}
	wg.Wait()
	require.Len(t, slices.Compact(ids), 1, "%v", ids)
	require.NotEmpty(t, ids[0])

	before := stacktest.HistoryTypes(t, s, id)
	a = post("add_item", "", "", `""`)
	require.Equal(t, http.StatusUnprocessableEntity, a.Status, a.Body)
	require.Equal(t, "update_rejected", a.Body["error"])
	require.Contains(t, a.Body["message"], "an item needs a name")
	a = post("remove_item", "", "", `"apple"`)
	require.Equal(t, http.StatusNotFound, a.Status, a.Body)
	require.Equal(t, "update_not_found", a.Body["error"])
	require.Equal(t, before, stacktest.HistoryTypes(t, s, id), "refused updates write nothing to the history")

	// Bad input, refused at the edge.
	for _, tc := range []struct {
		name, query, body string
		status            int
		code              string
	}{
		{"add_item", "?wait=forever", `"x"`, 400, "invalid_wait"},
		{"add item", "", `"x"`, 400, "invalid_update_name"},
		{"add_item", "", `{"x":`, 400, "invalid_json"},
		{"add_item", "", `"\u0000"`, 400, "payload_unstorable"},
		{"add_item", "", `"` + strings.Repeat("x", 70<<10) + `"`, 413, "payload_too_large"},
		{"add_item", "", strings.Repeat("[", 600) + strings.Repeat("]", 600), 400, "payload_unstorable"},
	} {
		a := post(strings.ReplaceAll(tc.name, " ", "%20"), "", tc.query, tc.body)
		require.Equal(t, tc.status, a.Status, "%s%s: %v", tc.name, tc.query, a.Body)
		require.Equal(t, tc.code, a.Body["error"], "%s%s", tc.name, tc.query)
	}
	a = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/0190f0c4-0000-7000-8000-0000000000aa/updates/add_item", nil, `"x"`)
	require.Equal(t, http.StatusNotFound, a.Status, a.Body)
	require.Equal(t, "execution_not_found", a.Body["error"])

	// wait=accepted: 202 while the handler sleeps; GET reads it.
	a = post("slow", "", "?wait=accepted", `{}`)
	require.Equal(t, http.StatusAccepted, a.Status, a.Body)
	require.Equal(t, "accepted", a.Body["status"])
	slow := a.Body["update_id"].(string)
	g := stacktest.Call(t, "GET", updates+slow+"?wait=1s", nil, "")
	require.Equal(t, http.StatusOK, g.Status, g.Body)
	require.Equal(t, "accepted", g.Body["status"])
	g = stacktest.Call(t, "GET", updates+"0190f0c4-0000-7000-8000-0000000000bb", nil, "")
	require.Equal(t, http.StatusNotFound, g.Status, g.Body)
	require.Equal(t, "update_not_found", g.Body["error"])

	require.NoError(t, c.SendSignal(ctx, id, "done", struct{}{}))
	var items []string
	_, err = c.WaitResult(ctx, id, &items)
	require.NoError(t, err)
	require.Equal(t, []string{"apple", "fig"}, items)
	_, err = c.AwaitUpdate(ctx, id, slow)
	stacktest.RequireAPIError(t, err, http.StatusConflict, "execution_closed")
	a = post("add_item", "", "", `"late"`)
	require.Equal(t, http.StatusConflict, a.Status, a.Body)
	require.Equal(t, "execution_closed", a.Body["error"])
	a = post("add_item", "u-1", "", `"apple"`)
	require.Equal(t, http.StatusOK, a.Status, "a key's answer stays after the close: %v", a.Body)

	hist := stacktest.HistoryTypes(t, s, id)
	count := func(typ string) int {
		n := 0
		for _, h := range hist {
			if h == typ {
				n++
			}
		}
		return n
	}
	require.Equal(t, 3, count("WorkflowUpdateAccepted"), "apple, fig, slow: %v", hist)
	require.Equal(t, 2, count("WorkflowUpdateCompleted"), "%v", hist)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM workflow_updates WHERE idempotency_key = 'u-2'`))
}
