package client_test

import (
	"context"
	"encoding/json"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

func TestClientStartWaitAndRead(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)
	in := examples.ChargeInput{AmountCents: 500, CustomerID: "cus_1"}

	// A keyed start, then its replay.
	first, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{IdempotencyKey: "cl-evt-1"})
	require.NoError(t, err)
	require.True(t, first.StartedFresh)
	require.False(t, first.Deduplicated)
	require.True(t, first.Keyed)
	require.Equal(t, examples.WorkflowCharge, first.WorkflowName)
	require.NotEmpty(t, first.WorkflowID)
	require.Nil(t, first.FirstSeenAt)
	again, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{IdempotencyKey: "cl-evt-1"})
	require.NoError(t, err)
	require.Equal(t, first.ExecutionID, again.ExecutionID)
	require.False(t, again.StartedFresh)
	require.True(t, again.Deduplicated)
	require.True(t, again.Keyed)
	require.NotNil(t, again.FirstSeenAt)
	require.NotNil(t, again.ExpiresAt)

	var out examples.ChargeResult
	exec, err := c.WaitResult(ctx, first.ExecutionID, &out)
	require.NoError(t, err)
	require.Equal(t, client.StatusCompleted, exec.Status)
	require.NotEmpty(t, out.ChargeID)
	require.NotNil(t, exec.ClosedAt)
	require.JSONEq(t, `{"amount_cents": 500, "customer_id": "cus_1"}`, string(exec.Input))
	require.Equal(t, 1, s.Services.Payments.Charges())
	// The client's view is the raw API's.
	require.Equal(t, out.ChargeID, stacktest.WaitCompleted(t, s, first.ExecutionID)["result"].(map[string]any)["charge_id"])

	// Unkeyed starts on a workflow_id: the second finds the first.
	byID, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{WorkflowID: "cl-order-1"})
	require.NoError(t, err)
	require.True(t, byID.StartedFresh)
	require.False(t, byID.Keyed)
	require.Equal(t, "cl-order-1", byID.WorkflowID)
	byID2, err := c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{WorkflowID: "cl-order-1"})
	require.NoError(t, err)
	require.Equal(t, byID.ExecutionID, byID2.ExecutionID)
	require.False(t, byID2.StartedFresh || byID2.Deduplicated || byID2.Keyed)

	// A declined card fails the execution.
	declined, err := c.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 500, CustomerID: fakepay.DeclinedCustomer}, client.StartOptions{})
	require.NoError(t, err)
	exec, err = c.WaitResult(ctx, declined.ExecutionID, &out)
	var failed *client.ExecutionFailedError
	require.ErrorAs(t, err, &failed)
	require.Equal(t, client.StatusFailed, failed.Status)
	require.Equal(t, declined.ExecutionID, failed.ExecutionID)
	require.Equal(t, examples.WorkflowCharge, failed.WorkflowName)
	require.Contains(t, failed.Message, "declined")
	require.Contains(t, err.Error(), "Failed")
	require.Equal(t, client.StatusFailed, exec.Status)
	require.NotEqual(t, "null", string(exec.Error))

	// Refusals are APIErrors.
	_, err = c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{WorkflowID: "cl-order-1", ReusePolicy: client.ReuseRejectDuplicate})
	require.ErrorIs(t, err, client.ErrConflict)
	stacktest.RequireAPIError(t, err, 409, "workflow_id_conflict")
	_, err = c.Start(ctx, examples.WorkflowCharge, map[string]any{"amount_cents": 0}, client.StartOptions{})
	apiErr := stacktest.RequireAPIError(t, err, 422, "input_invalid")
	require.NotEmpty(t, apiErr.Violations)
	require.False(t, errors.Is(err, client.ErrNotFound) || errors.Is(err, client.ErrConflict))
	_, err = c.Start(ctx, examples.WorkflowCharge, in, client.StartOptions{IdempotencyKey: "conn:reserved"})
	stacktest.RequireAPIError(t, err, 400, "invalid_idempotency_key")
	_, err = c.Start(ctx, examples.WorkflowCharge, map[string]any{"amount_cents": 1, "customer_id": "c\x00"}, client.StartOptions{})
	apiErr = stacktest.RequireAPIError(t, err, 400, "payload_unstorable")
	require.Equal(t, "input", apiErr.Field)
	require.Equal(t, "/input/customer_id", apiErr.Pointer, "encoding/json writes U+0000 as \\u0000, which PostgreSQL cannot store")

	// Describe, History, List.
	d, err := c.Describe(ctx, first.ExecutionID)
	require.NoError(t, err)
	require.Equal(t, first.ExecutionID, d.ExecutionID)
	require.Equal(t, first.WorkflowID, d.WorkflowID)
	require.Equal(t, client.StatusCompleted, d.Status)
	require.True(t, d.Terminal())
	require.JSONEq(t, `{"charge_id": "`+out.ChargeID+`"}`, string(d.Result))
	require.Equal(t, "null", string(d.Error))
	require.False(t, d.CreatedAt.IsZero())

	events, err := c.History(ctx, first.ExecutionID)
	require.NoError(t, err)
	var types []string
	for i, ev := range events {
		require.Equal(t, i+1, ev.Seq)
		require.False(t, ev.At.IsZero())
		require.NotContains(t, ev.Attrs, "seq")
		types = append(types, ev.Type)
	}
	require.Equal(t, stacktest.HistoryTypes(t, s, first.ExecutionID), types)
	require.Equal(t, []string{"WorkflowStarted", "WorkflowTaskCompleted", "ActivityScheduled", "ActivityCompleted", "WorkflowTaskCompleted", "WorkflowCompleted"}, types)
	require.Equal(t, examples.ActivityChargeCard, events[2].Attrs["activity_name"])
	require.NotEmpty(t, events[2].Attrs["idempotency_key"])
	require.Equal(t, "cl-evt-1", events[0].Attrs["idempotency_key"])

	all, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowCharge})
	require.NoError(t, err)
	require.Len(t, all, 3)
	failedOnly, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowCharge, Status: client.StatusFailed})
	require.NoError(t, err)
	require.Len(t, failedOnly, 1)
	require.Equal(t, declined.ExecutionID, failedOnly[0].ExecutionID)
	one, err := c.List(ctx, client.ListOptions{Limit: 1})
	require.NoError(t, err)
	require.Len(t, one, 1)
	none, err := c.List(ctx, client.ListOptions{Workflow: examples.WorkflowOnboarding})
	require.NoError(t, err)
	require.Empty(t, none)
	_, err = c.List(ctx, client.ListOptions{Status: "Sleeping"})
	stacktest.RequireAPIError(t, err, 400, "invalid_status")

	// Unknown executions are ErrNotFound.
	const unknown = "01a23712-0000-7000-8000-000000000000"
	_, err = c.Describe(ctx, unknown)
	require.ErrorIs(t, err, client.ErrNotFound)
	stacktest.RequireAPIError(t, err, 404, "execution_not_found")
	_, err = c.History(ctx, "not-a-uuid")
	stacktest.RequireAPIError(t, err, 400, "invalid_execution_id")
	_, err = c.WaitResult(ctx, unknown, nil)
	require.ErrorIs(t, err, client.ErrNotFound)
}

// item is the payload a typed signal to collect carries.
type item struct {
	N int `json:"n"`
}

func TestClientSignals(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	c, ctx := stacktest.Client(t, s)

	// The same key five times delivers once.
	run, err := c.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 1}, client.StartOptions{})
	require.NoError(t, err)
	var delivered []bool
	for range 5 {
		d, err := c.SendSignalIdempotent(ctx, run.ExecutionID, "item", item{N: 1}, "cl-sig-1")
		require.NoError(t, err)
		delivered = append(delivered, d)
	}
	require.Equal(t, []bool{true, false, false, false, false}, delivered)
	var result examples.CollectResult
	_, err = c.WaitResult(ctx, run.ExecutionID, &result)
	require.NoError(t, err)
	require.Len(t, result.Items, 1)
	require.JSONEq(t, `{"n": 1}`, string(result.Items[0]))
	require.Len(t, stacktest.SignalEvents(t, s, run.ExecutionID), 1)

	// After it closed: a landed key is still false, anything new 409.
	d, err := c.SendSignalIdempotent(ctx, run.ExecutionID, "item", item{N: 1}, "cl-sig-1")
	require.NoError(t, err)
	require.False(t, d)
	_, err = c.SendSignalIdempotent(ctx, run.ExecutionID, "item", item{N: 2}, "cl-sig-2")
	require.ErrorIs(t, err, client.ErrConflict)
	stacktest.RequireAPIError(t, err, 409, "execution_terminal")
	err = c.SendSignal(ctx, run.ExecutionID, "item", nil)
	require.ErrorIs(t, err, client.ErrConflict)
	err = c.SendSignal(ctx, "01a23712-0000-7000-8000-000000000000", "item", 1)
	require.ErrorIs(t, err, client.ErrNotFound)
	stacktest.RequireAPIError(t, err, 404, "execution_not_found")
	_, err = c.SendSignalIdempotent(ctx, run.ExecutionID, "bad.name", 1, "k")
	stacktest.RequireAPIError(t, err, 400, "invalid_signal_name")

	// Typed signals: the example's Signal[json.RawMessage] and one of our
	// own on the same name.
	typed, err := c.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 3}, client.StartOptions{})
	require.NoError(t, err)
	d, err = examples.ItemSignal.SendIdempotent(ctx, c, typed.ExecutionID, json.RawMessage(`{"n": 1}`), "typed-1")
	require.NoError(t, err)
	require.True(t, d)
	d, err = examples.ItemSignal.SendIdempotent(ctx, c, typed.ExecutionID, json.RawMessage(`{"n": 1}`), "typed-1")
	require.NoError(t, err)
	require.False(t, d)
	itemSignal := harvest.NewSignal[item]("item")
	d, err = itemSignal.SendIdempotent(ctx, c, typed.ExecutionID, item{N: 2}, "typed-2")
	require.NoError(t, err)
	require.True(t, d)
	require.NoError(t, itemSignal.Send(ctx, c, typed.ExecutionID, item{N: 3}))
	_, err = c.WaitResult(ctx, typed.ExecutionID, &result)
	require.NoError(t, err)
	raw, err := json.Marshal(result.Items)
	require.NoError(t, err)
	require.JSONEq(t, `[{"n": 1}, {"n": 2}, {"n": 3}]`, string(raw))
	require.ErrorIs(t, itemSignal.Send(ctx, c, typed.ExecutionID, item{N: 4}), client.ErrConflict)

	// Signal-with-start: the first event starts the run, its retry is a
	// no-op, the next event lands on the same run.
	sws := func(key, payload string) *client.SignalWithStartResult {
		t.Helper()
		r, err := c.SignalWithStart(ctx, examples.WorkflowCollect, client.SignalWithStartOptions{
			WorkflowID: "cl-order-1", Input: examples.CollectInput{Count: 2},
			SignalName: "item", SignalPayload: payload, IdempotencyKey: key,
		})
		require.NoError(t, err)
		return r
	}
	created := sws("cl-order-1-created", "created")
	require.True(t, created.StartedFresh)
	require.True(t, created.SignalDelivered)
	require.Equal(t, "cl-order-1", created.WorkflowID)
	retry := sws("cl-order-1-created", "created")
	require.Equal(t, created.ExecutionID, retry.ExecutionID)
	require.False(t, retry.StartedFresh)
	require.False(t, retry.SignalDelivered)
	paid := sws("cl-order-1-paid", "paid")
	require.Equal(t, created.ExecutionID, paid.ExecutionID)
	require.False(t, paid.StartedFresh)
	require.True(t, paid.SignalDelivered)
	_, err = c.WaitResult(ctx, created.ExecutionID, &result)
	require.NoError(t, err)
	raw, err = json.Marshal(result.Items)
	require.NoError(t, err)
	require.JSONEq(t, `["created", "paid"]`, string(raw))
	_, err = c.SignalWithStart(ctx, examples.WorkflowCollect, client.SignalWithStartOptions{WorkflowID: "x", SignalName: "bad.name"})
	stacktest.RequireAPIError(t, err, 400, "invalid_signal_name")
}

func TestClientPollsLateOutcomes(t *testing.T) {
	t.Parallel()
	// An outcome wait too short for any apply makes the API answer 202;
	// the client polls the command.
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{OutcomeWait: time.Nanosecond}})
	c, ctx := stacktest.Client(t, s)
	raw := stacktest.StartWorkflow(t, s, examples.WorkflowCharge, "cl-late-probe", `{`+stacktest.ChargeInput+`}`)
	require.Equal(t, 202, raw.Status, "the stack answers late: %v", raw.Body)

	run, err := c.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 100, CustomerID: "c"}, client.StartOptions{IdempotencyKey: "cl-late-1"})
	require.NoError(t, err)
	require.True(t, run.StartedFresh)
	require.True(t, run.Keyed)
	require.NotEmpty(t, run.ExecutionID)
	var out examples.ChargeResult
	_, err = c.WaitResult(ctx, run.ExecutionID, &out)
	require.NoError(t, err)
	require.NotEmpty(t, out.ChargeID)

	// A late refusal is the refusal.
	_, err = c.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 100, CustomerID: "c"},
		client.StartOptions{WorkflowID: run.WorkflowID, ReusePolicy: client.ReuseRejectDuplicate})
	require.ErrorIs(t, err, client.ErrConflict)

	collect, err := c.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 2}, client.StartOptions{})
	require.NoError(t, err)
	d, err := c.SendSignalIdempotent(ctx, collect.ExecutionID, "item", 1, "cl-late-sig")
	require.NoError(t, err)
	require.True(t, d)
	for range 3 {
		_, err := c.SendSignalIdempotent(ctx, collect.ExecutionID, "item", 1, "cl-late-sig")
		require.NoError(t, err)
	}
	require.Len(t, stacktest.SignalEvents(t, s, collect.ExecutionID), 1, "retries land nothing")
	require.NoError(t, c.SendSignal(ctx, collect.ExecutionID, "item", 2))
	var result examples.CollectResult
	_, err = c.WaitResult(ctx, collect.ExecutionID, &result)
	require.NoError(t, err)
	require.Len(t, result.Items, 2)

	sws, err := c.SignalWithStart(ctx, examples.WorkflowCollect, client.SignalWithStartOptions{
		WorkflowID: "cl-late-order", Input: examples.CollectInput{Count: 1}, SignalName: "item", SignalPayload: "x", IdempotencyKey: "k"})
	require.NoError(t, err)
	require.True(t, sws.StartedFresh)
	require.True(t, sws.SignalDelivered)
	_, err = c.WaitResult(ctx, sws.ExecutionID, nil)
	require.NoError(t, err)

	// A context that ends first leaves the command pending, by name.
	short, cancel := context.WithCancel(ctx)
	cancel()
	_, err = c.Start(short, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 1, CustomerID: "c"}, client.StartOptions{})
	require.ErrorIs(t, err, context.Canceled)
}
