package harvesttest_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/harvesttest"
)

// TestTheKitChecksSearchAttributesAsADeploymentDoes: workflow code that
// upserts declared search attributes completes in the kit; one that sets
// an undeclared attribute fails its workflow task, as the scheduler
// fails it in a deployment, and waits.
func TestTheKitChecksSearchAttributesAsADeploymentDoes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "tagged", func(ctx *harvest.WorkflowContext, attr string) (string, error) {
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{attr: "eu"}); err != nil {
				return "", err
			}
			return "done", nil
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{SearchAttributes: map[string]map[string]string{"tagged": {"region": "keyword"}}})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "tagged", "region")
	require.NoError(t, err)
	var out string
	require.NoError(t, x.Result(&out))
	require.Equal(t, "done", out)

	bad, err := env.Start(ctx, "tagged", "planet")
	require.NoError(t, err, "the start is taken; its task fails on the scheduler")
	ex, err := bad.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, ex.Status)
	require.NotNil(t, ex.TaskFailing)
	require.Equal(t, "invalid_search_attribute", ex.TaskFailing.Reason)
	require.Contains(t, ex.TaskFailing.Message, "planet")
}

// TestStartsAndChildrenCarrySearchAttributes: a start, a
// signal-with-start and a child's start each set the new execution's
// search attributes; one the workflow does not declare, or of another
// type, is refused (the child's start fails, and the parent's code reads
// why), and nothing starts.
func TestStartsAndChildrenCarrySearchAttributes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "tagged", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			_, err := harvest.NewSignal[string]("go").Receive(ctx)
			return "done", err
		})
		harvest.RegisterWorkflow(w, "parent", func(ctx *harvest.WorkflowContext, attrs map[string]any) (string, error) {
			var out string
			err := harvest.ExecuteChildWorkflow(ctx, "tagged", struct{}{}, harvest.ChildOptions{WorkflowID: "child-of-parent",
				SearchAttributes: attrs}).Get(&out)
			var failed *harvest.ChildWorkflowError
			if errors.As(err, &failed) {
				return failed.Code, nil
			}
			return out, err
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{SearchAttributes: map[string]map[string]string{
		"tagged": {"region": "keyword", "tier": "int"}}})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "tagged", struct{}{}, harvesttest.StartOptions{SearchAttributes: map[string]any{"region": "eu", "tier": 2}})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"region": "eu", "tier": float64(2)}, attrsOf(t, x))

	sws, err := env.SignalWithStart(ctx, "tagged", "sws-1", "go", "now", struct{}{}, harvesttest.StartOptions{SearchAttributes: map[string]any{"region": "us"}})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"region": "us"}, attrsOf(t, sws))

	for _, bad := range []map[string]any{{"planet": "mars"}, {"tier": "gold"}} {
		_, err = env.Start(ctx, "tagged", struct{}{}, harvesttest.StartOptions{SearchAttributes: bad})
		require.ErrorIs(t, err, &client.APIError{Code: client.CodeInvalidSearchAttribute}, "%v", bad)
	}

	p, err := env.Start(ctx, "parent", map[string]any{"region": "ap"})
	require.NoError(t, err)
	var childID string
	events, err := p.History()
	require.NoError(t, err)
	for _, ev := range events {
		if ev.Type == "ChildWorkflowStarted" {
			childID, _ = ev.Attrs["execution_id"].(string)
		}
	}
	require.NotEmpty(t, childID)
	child := env.Execution(childID)
	_, err = child.Signal(ctx, "go", "now")
	require.NoError(t, err)
	var out string
	require.NoError(t, p.Result(&out))
	require.Equal(t, "done", out)
	require.Equal(t, map[string]any{"region": "ap"}, attrsOf(t, child))

	p, err = env.Start(ctx, "parent", map[string]any{"planet": "mars"})
	require.NoError(t, err)
	require.NoError(t, p.Result(&out))
	require.Equal(t, client.CodeInvalidSearchAttribute, out, "the child's start is refused, and the parent reads why")

	// A schedule's fires carry its search attributes.
	_, err = env.PutSchedule(ctx, "tagged-hourly", api.ScheduleRequest{Workflow: "tagged", Spec: api.ScheduleSpec{Every: "1h"},
		SearchAttributes: map[string]json.RawMessage{"region": json.RawMessage(`"sched"`)}})
	require.NoError(t, err)
	require.NoError(t, env.TriggerSchedule(ctx, "tagged-hourly"))
	fires, err := env.ScheduleFires("tagged-hourly")
	require.NoError(t, err)
	require.NotEmpty(t, fires)
	require.NotEmpty(t, fires[0].ExecutionID)
	require.Equal(t, map[string]any{"region": "sched"}, attrsOf(t, env.Execution(fires[0].ExecutionID)))
	_, err = env.PutSchedule(ctx, "bad", api.ScheduleRequest{Workflow: "tagged", Spec: api.ScheduleSpec{Every: "1h"},
		SearchAttributes: map[string]json.RawMessage{"planet": json.RawMessage(`"mars"`)}})
	require.ErrorIs(t, err, &client.APIError{Code: client.CodeInvalidSearchAttribute})
}

// TestTheKitRemovesASearchAttributeUpsertedAsNil: workflow code that
// upserts an attribute as nil removes it, in the kit as in a deployment;
// a replay of the run sets the same, and the run it continues as keeps
// what is left; a nil for a child's attribute is
// refused by the SDK, and a start's by the kit as by ingest.
func TestTheKitRemovesASearchAttributeUpsertedAsNil(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "staged", func(ctx *harvest.WorkflowContext, in struct{ Run int }) (string, error) {
			if in.Run > 0 {
				return "done", nil
			}
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": "open", "region": "eu"}); err != nil {
				return "", err
			}
			if _, err := harvest.NewSignal[string]("next").Receive(ctx); err != nil {
				return "", err
			}
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"stage": nil}); err != nil {
				return "", err
			}
			if _, err := harvest.NewSignal[string]("next").Receive(ctx); err != nil {
				return "", err
			}
			return "", harvest.ContinueAsNew(ctx, struct{ Run int }{1})
		})
		harvest.RegisterWorkflow(w, "nil_child", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			err := harvest.ExecuteChildWorkflow(ctx, "staged", struct{}{}, harvest.ChildOptions{
				SearchAttributes: map[string]any{"stage": nil}}).Get(nil)
			if err == nil {
				return "", errors.New("a child's nil search attribute was taken")
			}
			return err.Error(), nil
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{SearchAttributes: map[string]map[string]string{
		"staged": {"stage": "keyword", "region": "keyword"}}, WorkflowCacheSize: -1})
	require.NoError(t, err)
	t.Cleanup(env.Close)

	x, err := env.Start(ctx, "staged", struct{}{})
	require.NoError(t, err)
	require.Equal(t, map[string]any{"stage": "open", "region": "eu"}, attrsOf(t, x))
	_, err = x.Signal(ctx, "next", "remove")
	require.NoError(t, err)
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(t, x))
	// With the cache off the last signal's task replays the whole run,
	// the removal included; the run it continues as keeps what is left.
	_, err = x.Signal(ctx, "next", "end")
	require.NoError(t, err)
	d, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusContinuedAsNew, d.Status)
	require.Equal(t, map[string]any{"region": "eu"}, d.SearchAttributes)
	next := env.Execution(d.ContinuedAs)
	var out string
	require.NoError(t, next.Result(&out))
	require.Equal(t, "done", out)
	require.Equal(t, map[string]any{"region": "eu"}, attrsOf(t, next))

	_, err = env.Start(ctx, "staged", struct{}{}, harvesttest.StartOptions{SearchAttributes: map[string]any{"stage": nil}})
	require.ErrorIs(t, err, &client.APIError{Code: client.CodeInvalidSearchAttribute})

	p, err := env.Start(ctx, "nil_child", struct{}{})
	require.NoError(t, err)
	require.NoError(t, p.Result(&out))
	require.Contains(t, out, "nil is no search attribute value")
}

// TestARunOfAnotherWorkflowKeepsOnlyWhatItDeclaresAlike: a run that
// continues as another workflow keeps the attributes that workflow
// declares with a type of the same kind, and none other.
func TestARunOfAnotherWorkflowKeepsOnlyWhatItDeclaresAlike(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	register := func(w *harvest.Worker) {
		harvest.RegisterWorkflow(w, "first_stage", func(ctx *harvest.WorkflowContext, _ struct{}) (string, error) {
			if err := harvest.UpsertSearchAttributes(ctx, map[string]any{"region": "eu", "tier": 5, "stage": "one"}); err != nil {
				return "", err
			}
			return "", harvest.ContinueAsNew(ctx, struct{}{}, harvest.ContinueAsNewOptions{WorkflowName: "second_stage"})
		})
		harvest.RegisterWorkflow(w, "second_stage", func(*harvest.WorkflowContext, struct{}) (string, error) {
			return "done", nil
		})
	}
	env, err := harvesttest.New(register, harvesttest.Config{SearchAttributes: map[string]map[string]string{
		"first_stage":  {"region": "keyword", "tier": "int", "stage": "keyword"},
		"second_stage": {"region": "keyword", "tier": "keyword"},
	}})
	require.NoError(t, err)
	t.Cleanup(env.Close)
	x, err := env.Start(ctx, "first_stage", struct{}{})
	require.NoError(t, err)
	d, err := x.Describe()
	require.NoError(t, err)
	require.Equal(t, client.StatusContinuedAsNew, d.Status)
	next, err := env.Execution(d.ContinuedAs).Describe()
	require.NoError(t, err)
	require.Equal(t, "second_stage", next.WorkflowName)
	require.Equal(t, map[string]any{"region": "eu"}, next.SearchAttributes,
		"tier is an int there and a keyword here; stage is not declared here")
}

// attrsOf is x's search attributes, as its describe shows them.
func attrsOf(t *testing.T, x *harvesttest.Execution) map[string]any {
	t.Helper()
	d, err := x.Describe()
	require.NoError(t, err)
	return d.SearchAttributes
}
