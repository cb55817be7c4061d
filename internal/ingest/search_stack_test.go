package ingest_test

import (
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestSearchAttributesAreSetFilteredAndCounted: a start's search
// attributes and those its workflow code upserts are indexed, shown on
// describe with their types, and filter the list and the count, by
// equality and by range; an undeclared attribute or a value of another
// type is refused at the start (400 invalid_search_attribute, nothing
// started) and fails the workflow task that sets it (the execution shows
// the task failing, and goes on once the code is right); a malformed
// filter is refused.
func TestSearchAttributesAreSetFilteredAndCounted(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{
		"sa_order": {"customer_id": "keyword", "amount": "int", "stage": "keyword", "vip": "bool", "due": "time"},
		"sa_bad":   {"customer_id": "keyword"},
	}
	s := stacktest.Start(t, devstack.Config{
		Ingest:    ingest.Config{SearchAttributes: schema},
		Scheduler: scheduler.Config{SearchAttributes: schema},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "sa_order", func(ctx *harvest.WorkflowContext, in struct{ Amount int }) (string, error) {
				if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": "charged", "amount": in.Amount,
					"due": time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)}); err != nil {
					return "", err
				}
				return "ok", nil
			})
			harvest.RegisterWorkflow(w, "sa_bad", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"region": "eu"}); err != nil {
					return "", err
				}
				return "never", nil
			})
		},
	})
	start := func(wf, body string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/"+wf+"/start", nil, body)
	}
	for _, tc := range []struct{ body, field string }{
		{`{"search_attributes": {"region": "eu"}}`, "search_attributes.region"},
		{`{"search_attributes": {"amount": "lots"}}`, "search_attributes.amount"},
		{`{"search_attributes": {"amount": 1.5}}`, "search_attributes.amount"},
		{`{"search_attributes": {"due": "tomorrow"}}`, "search_attributes.due"},
		{`{"search_attributes": {"vip": "yes"}}`, "search_attributes.vip"},
	} {
		r := start("sa_order", tc.body)
		require.Equal(t, 400, r.Status, "%s: %v", tc.body, r.Body)
		require.Equal(t, "invalid_search_attribute", r.Body["error"], r.Body)
		require.Equal(t, tc.field, r.Body["field"], r.Body)
	}

	var ids []string
	for i, c := range []struct {
		customer string
		amount   int
		vip      bool
	}{{"c_1", 100, true}, {"c_1", 500, false}, {"c_2", 900, false}} {
		r := start("sa_order", fmt.Sprintf(`{"workflow_id": "sa-%d", "input": {"Amount": %d}, "search_attributes": {"customer_id": %q, "vip": %v}}`,
			i, c.amount, c.customer, c.vip))
		require.Equal(t, 201, r.Status, r.Body)
		ids = append(ids, r.Body["execution_id"].(string))
	}
	for _, id := range ids {
		probe.Until(t, 30*time.Second, "the execution to complete", func() bool {
			return stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["status"] == "Completed"
		})
	}
	e := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+ids[1], nil, "").Body
	require.Equal(t, map[string]any{"customer_id": "c_1", "vip": false, "stage": "charged", "amount": float64(500),
		"due": "2026-12-24T00:00:00Z"}, e["search_attributes"])

	list := func(query string) []string {
		t.Helper()
		r := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?workflow=sa_order&"+query, nil, "")
		require.Equal(t, 200, r.Status, r.Body)
		var out []string
		for _, x := range r.Body["executions"].([]any) {
			out = append(out, x.(map[string]any)["execution_id"].(string))
		}
		return out
	}
	count := func(query string) float64 {
		t.Helper()
		r := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/count?"+query, nil, "")
		require.Equal(t, 200, r.Status, r.Body)
		return r.Body["count"].(float64)
	}
	require.Equal(t, []string{ids[1], ids[0]}, list("attr.customer_id=c_1"))
	require.Equal(t, []string{ids[2], ids[1]}, list("attr.amount.gte=500"))
	require.Equal(t, []string{ids[1]}, list("attr.amount.gt=100&attr.amount.lt=900"))
	require.Equal(t, []string{ids[0]}, list("attr.vip=true"))
	require.Equal(t, []string{ids[2], ids[1], ids[0]}, list("attr.due.lte=2026-12-24T00:00:00Z"))
	require.Empty(t, list("attr.due.gt=2026-12-24T00:00:00Z"))
	require.Equal(t, float64(2), count("workflow=sa_order&attr.customer_id=c_1"))
	require.Equal(t, float64(3), count("attr.stage=charged"), "a name one workflow declares filters without naming it")
	require.Equal(t, float64(3), count("workflow=sa_order"))
	for _, q := range []string{"attr.region=eu", "attr.amount=lots", "attr.customer_id.gt=c", "attr.amount.near=5", "attr.1x=2"} {
		r := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?"+q, nil, "")
		require.Equal(t, 400, r.Status, "%s: %v", q, r.Body)
		require.Equal(t, "invalid_search_attribute", r.Body["error"], r.Body)
	}

	// A batch filters on them too.
	r := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil,
		`{"operation": "terminate", "filter": {"workflow": "sa_order", "search_attributes": {"customer_id": "c_1", "amount": {"gte": 200}}}}`)
	require.Equal(t, 201, r.Status, r.Body)
	var b map[string]any
	probe.Until(t, 30*time.Second, "the batch to complete", func() bool {
		b = stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/"+r.Body["batch_id"].(string), nil, "").Body
		return b["state"] == "completed"
	})
	require.Equal(t, float64(1), b["matched"], "c_1 with an amount of 200 or more: %v", b)
	require.Equal(t, map[string]any{"customer_id": "c_1", "amount": map[string]any{"gte": float64(200)}},
		b["filter"].(map[string]any)["search_attributes"])
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil,
		`{"operation": "terminate", "filter": {"workflow": "sa_order", "search_attributes": {"amount": {"near": 5}}}}`)
	require.Equal(t, 400, r.Status, r.Body)
	require.Equal(t, "invalid_filter", r.Body["error"])
	require.Equal(t, "filter.search_attributes.amount", r.Body["field"])

	// Workflow code that sets what its workflow does not declare: its
	// task fails, and it says why.
	bad := start("sa_bad", `{}`).Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "the task to fail", func() bool {
		tf, _ := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+bad, nil, "").Body["task_failing"].(map[string]any)
		return tf != nil && tf["reason"] == "invalid_search_attribute"
	})
	require.Equal(t, "Running", stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+bad, nil, "").Body["status"])
}

// TestSignalWithStartAndTheClientSetSearchAttributes: a signal-with-start
// that starts its execution sets the search attributes it carries, and
// refuses one the workflow does not declare (400
// invalid_search_attribute, nothing started); the Go client's Start and
// SignalWithStart send them.
func TestSignalWithStartAndTheClientSetSearchAttributes(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{"sa_wait": {"customer_id": "keyword", "amount": "int"}}
	s := stacktest.Start(t, devstack.Config{
		Ingest:    ingest.Config{SearchAttributes: schema},
		Scheduler: scheduler.Config{SearchAttributes: schema},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "sa_wait", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				return harvest.NewSignal[string]("go").Receive(ctx)
			})
		},
	})
	ctx := natstest.Context(t)
	sws := func(body string) stacktest.Answer {
		return stacktest.Call(t, "POST", s.URL()+"/api/harvest/workflows/sa_wait/signal-with-start", nil, body)
	}
	r := sws(`{"workflow_id": "sws-bad", "signal_name": "go", "search_attributes": {"region": "eu"}}`)
	require.Equal(t, 400, r.Status, r.Body)
	require.Equal(t, "invalid_search_attribute", r.Body["error"], r.Body)
	require.Equal(t, "search_attributes.region", r.Body["field"], r.Body)
	require.Equal(t, float64(0), stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/count?workflow=sa_wait", nil, "").Body["count"],
		"nothing started")

	r = sws(`{"workflow_id": "sws-1", "signal_name": "go", "signal_payload": "x", "search_attributes": {"customer_id": "c_9", "amount": 7}}`)
	require.Equal(t, 201, r.Status, r.Body)
	e := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+r.Body["execution_id"].(string), nil, "").Body
	require.Equal(t, map[string]any{"customer_id": "c_9", "amount": float64(7)}, e["search_attributes"])

	c, err := client.New(client.Config{BaseURL: s.URL()})
	require.NoError(t, err)
	started, err := c.Start(ctx, "sa_wait", struct{}{}, client.StartOptions{SearchAttributes: map[string]any{"customer_id": "c_10", "amount": 8}})
	require.NoError(t, err)
	_, err = c.Start(ctx, "sa_wait", struct{}{}, client.StartOptions{SearchAttributes: map[string]any{"amount": "lots"}})
	require.ErrorIs(t, err, &client.APIError{Code: client.CodeInvalidSearchAttribute})
	viaClient, err := c.SignalWithStart(ctx, "sa_wait", client.SignalWithStartOptions{WorkflowID: "sws-2", SignalName: "go",
		SearchAttributes: map[string]any{"customer_id": "c_11"}})
	require.NoError(t, err)
	for id, want := range map[string]map[string]any{
		started.ExecutionID:   {"customer_id": "c_10", "amount": float64(8)},
		viaClient.ExecutionID: {"customer_id": "c_11"},
	} {
		d, err := c.Describe(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, d.SearchAttributes)
	}
	n, err := c.Count(ctx, client.ListOptions{Workflow: "sa_wait", SearchAttributes: map[string]string{"customer_id": "c_11"}})
	require.NoError(t, err)
	require.EqualValues(t, 1, n)
}

// TestASearchAttributeRemovedIsFoundNoMore: workflow code that upserts
// an attribute as nil removes it: describe no longer shows it, and the
// list, the count and a batch no longer find the execution by it; a run
// that continues as new does not have it back, and setting it again
// finds the execution again. A start cannot remove one (400
// invalid_search_attribute), and the SDK refuses nil for a child's.
func TestASearchAttributeRemovedIsFoundNoMore(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{"sa_stage": {"stage": "keyword", "region": "keyword"}}
	s := stacktest.Start(t, devstack.Config{
		Ingest:    ingest.Config{SearchAttributes: schema},
		Scheduler: scheduler.Config{SearchAttributes: schema},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "sa_stage", func(ctx *harvest.WorkflowContext, in struct{ Run int }) (string, error) {
				next := harvest.NewSignal[string]("next")
				if in.Run == 0 {
					if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": "open", "region": "eu"}); err != nil {
						return "", err
					}
					if _, err := next.Receive(ctx); err != nil {
						return "", err
					}
					if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": nil}); err != nil {
						return "", err
					}
					if _, err := next.Receive(ctx); err != nil {
						return "", err
					}
					return "", harvest.ContinueAsNew(ctx, struct{ Run int }{1})
				}
				if _, err := next.Receive(ctx); err != nil {
					return "", err
				}
				if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": "reopened"}); err != nil {
					return "", err
				}
				_, err := next.Receive(ctx)
				return "done", err
			})
		},
	})
	r := stacktest.StartWorkflow(t, s, "sa_stage", "", `{"search_attributes": {"stage": null}}`)
	require.Equal(t, 400, r.Status, r.Body)
	require.Equal(t, "invalid_search_attribute", r.Body["error"], r.Body)
	require.Equal(t, "search_attributes.stage", r.Body["field"], r.Body)

	r = stacktest.StartWorkflow(t, s, "sa_stage", "", `{"workflow_id": "stage-1"}`)
	require.Equal(t, 201, r.Status, r.Body)
	first := r.Body["execution_id"].(string)
	attrsOf := func(id string) any {
		return stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["search_attributes"]
	}
	count := func(query string) float64 {
		t.Helper()
		r := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/count?workflow=sa_stage&"+query, nil, "")
		require.Equal(t, 200, r.Status, r.Body)
		return r.Body["count"].(float64)
	}
	// waitFor waits until describe shows want.
	waitFor := func(id string, want map[string]any) {
		t.Helper()
		probe.Until(t, 30*time.Second, fmt.Sprintf("search attributes %v", want), func() bool {
			got, _ := attrsOf(id).(map[string]any)
			return fmt.Sprint(got) == fmt.Sprint(want)
		})
	}
	waitFor(first, map[string]any{"stage": "open", "region": "eu"})
	require.Equal(t, float64(1), count("attr.stage=open"))

	require.Equal(t, 202, stacktest.Signal(t, s, first, "next", "", "", `"remove"`).Status)
	waitFor(first, map[string]any{"region": "eu"})
	require.Equal(t, float64(0), count("attr.stage=open"), "a removed attribute finds nothing")
	require.Equal(t, float64(1), count("attr.region=eu"), "the others stay")
	list := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?workflow=sa_stage&attr.stage=open", nil, "")
	require.Equal(t, 200, list.Status, list.Body)
	require.Empty(t, list.Body["executions"])
	b := stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil,
		`{"operation": "terminate", "filter": {"workflow": "sa_stage", "search_attributes": {"stage": "open"}}}`)
	require.Equal(t, 201, b.Status, b.Body)
	var batch map[string]any
	probe.Until(t, 30*time.Second, "the batch to complete", func() bool {
		batch = stacktest.Call(t, "GET", s.URL()+"/api/harvest/batches/"+b.Body["batch_id"].(string), nil, "").Body
		return batch["state"] == "completed"
	})
	require.Equal(t, float64(0), batch["matched"], batch)

	// It continues as new: the new run keeps region, not stage.
	require.Equal(t, 202, stacktest.Signal(t, s, first, "next", "", "", `"continue"`).Status)
	stacktest.WaitStatus(t, s, first, "ContinuedAsNew")
	var second string
	probe.Until(t, 30*time.Second, "the new run", func() bool {
		l := stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions?workflow=sa_stage&status=Running", nil, "").Body
		xs, _ := l["executions"].([]any)
		if len(xs) != 1 {
			return false
		}
		second = xs[0].(map[string]any)["execution_id"].(string)
		return true
	})
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(second))

	// Set again, it is found again.
	require.Equal(t, 202, stacktest.Signal(t, s, second, "next", "", "", `"reopen"`).Status)
	waitFor(second, map[string]any{"stage": "reopened", "region": "eu"})
	require.Equal(t, float64(1), count("attr.stage=reopened"))

	// Reset to its first task, the run has what it had then: what the
	// run it continued passed on (not in its history), without what it
	// set after.
	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+second+"/reset", nil, `{"to": "first_task", "reapply_signals": false}`)
	require.Equal(t, 201, r.Status, r.Body)
	third := r.Body["execution_id"].(string)
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(third))
	require.Equal(t, float64(1), count("attr.stage=reopened"), "the old run, terminated, keeps its own")
	require.Equal(t, 202, stacktest.Signal(t, s, third, "next", "", "", `"reopen"`).Status)
	waitFor(third, map[string]any{"stage": "reopened", "region": "eu"})
	require.Equal(t, float64(2), count("attr.stage=reopened"))
	require.Equal(t, 202, stacktest.Signal(t, s, third, "next", "", "", `"end"`).Status)
	stacktest.WaitCompleted(t, s, third)

	// A batch's filter refuses null: no value is null, and an absent
	// attribute cannot be filtered on.
	b = stacktest.Call(t, "POST", s.URL()+"/api/harvest/batches", nil,
		`{"operation": "terminate", "filter": {"workflow": "sa_stage", "search_attributes": {"stage": null}}}`)
	require.Equal(t, 400, b.Status, b.Body)
	require.Equal(t, "invalid_filter", b.Body["error"], b.Body)
	require.Equal(t, "filter.search_attributes.stage", b.Body["field"], b.Body)
}

// TestARunOfAnotherWorkflowKeepsOnlyWhatItDeclaresAlike: a run that
// continues as another workflow keeps the attributes that workflow
// declares with a type of the same kind, and none other; a reset of it
// keeps the same.
func TestARunOfAnotherWorkflowKeepsOnlyWhatItDeclaresAlike(t *testing.T) {
	t.Parallel()
	schema := searchattr.Schema{
		"sa_first":  {"region": "keyword", "tier": "int", "stage": "keyword"},
		"sa_second": {"region": "keyword", "tier": "keyword"},
	}
	s := stacktest.Start(t, devstack.Config{
		Ingest:    ingest.Config{SearchAttributes: schema},
		Scheduler: scheduler.Config{SearchAttributes: schema},
		Register: func(w *harvest.Worker) {
			harvest.RegisterWorkflow(w, "sa_first", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"region": "eu", "tier": 5, "stage": "one"}); err != nil {
					return "", err
				}
				return "", harvest.ContinueAsNew(ctx, struct{}{}, harvest.ContinueAsNewOptions{WorkflowName: "sa_second"})
			})
			harvest.RegisterWorkflow(w, "sa_second", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
				return harvest.NewSignal[string]("go").Receive(ctx)
			})
		},
	})
	r := stacktest.StartWorkflow(t, s, "sa_first", "", `{}`)
	require.Equal(t, 201, r.Status, r.Body)
	first := stacktest.WaitStatus(t, s, r.Body["execution_id"].(string), "ContinuedAsNew")
	second := first["continued_as"].(string)
	attrsOf := func(id string) any {
		return stacktest.Call(t, "GET", s.URL()+"/api/harvest/executions/"+id, nil, "").Body["search_attributes"]
	}
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(second), "tier is an int there and a keyword here; stage is not declared here")
	rows := func(id string) int {
		return stacktest.DBCount(t, s, `SELECT count(*) FROM search_attributes WHERE execution_id = $1`, id)
	}
	require.Equal(t, 1, rows(second), "nothing else is copied, to be read as what it is not")
	probe.Until(t, 30*time.Second, "the run's first task to complete", func() bool {
		return slices.Contains(stacktest.HistoryTypes(t, s, second), "WorkflowTaskCompleted")
	})

	r = stacktest.Call(t, "POST", s.URL()+"/api/harvest/executions/"+second+"/reset", nil, `{"to": "first_task", "reapply_signals": false}`)
	require.Equal(t, 201, r.Status, r.Body)
	third := r.Body["execution_id"].(string)
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(third))
	require.Equal(t, 1, rows(third))
}
