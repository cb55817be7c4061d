package binding_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func paymentMessage(amount int) string {
	b, _ := json.Marshal(map[string]any{"type": "payment_intent.succeeded",
		"data": map[string]any{"object": map[string]any{"amount_cents": amount, "customer_id": fmt.Sprint("cus_", amount)}}})
	return string(b)
}

func paymentsBinding() binding.Binding {
	return binding.Binding{Name: "payments", Stream: "PAYMENTS", Subject: "payments.>", Rules: []webhook.Rule{
		{Event: "payment_intent.succeeded", Workflow: "charge", InputPointer: "/data/object"},
		{Event: "order.item_added", Workflow: "collect", Signal: "item", WorkflowID: "order-{/order_id}", InputPointer: "/sku",
			StartInput: map[string]any{"count": 2}},
	}}
}

func completedWithKey(t *testing.T, s *devstack.Stack, key string) int {
	t.Helper()
	return stacktest.DBCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed' AND idempotency_key = $1`, key)
}

func TestBindingStartsOneExecutionPerMessage(t *testing.T) {
	t.Parallel()
	// The binding's stream does not exist when the stack starts: the
	// stack starts all the same, and the binding waits for the stream.
	s := stacktest.Start(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})

	seq := u.Publish("payments.succeeded", paymentMessage(500), "").Sequence
	key := dedup.ConnKey("payments", "PAYMENTS", seq)
	probe.Until(t, 60*time.Second, "the charge to complete", func() bool { return completedWithKey(t, s, key) == 1 })
	u.Settled("PAYMENTS", "payments", seq)
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, s.Services.Payments.Charges())
	require.Equal(t, 1, stacktest.BindingCount(t, s, "payments", "published"))

	// The same stream message again: its consumer is reset, so the binding
	// makes it anew and takes the stream from its start. Same
	// coordinates, same key: no second execution.
	require.NoError(t, u.JetStream().DeleteConsumer(u.Context(), "PAYMENTS", binding.ConsumerPrefix+"payments"))
	u.Settled("PAYMENTS", "payments", seq)
	require.Equal(t, 1, stacktest.BindingCount(t, s, "payments", "duplicate"), "the redelivery made the same command")
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, completedWithKey(t, s, key))
	require.Equal(t, 1, s.Services.Payments.Charges())

	// API callers cannot write into the bindings' key namespace.
	require.Equal(t, 400, stacktest.StartWorkflow(t, s, "charge", key, `{`+stacktest.ChargeInput+`}`).Status)
}

func TestBindingRestartMakesOneExecution(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	run := func() *binding.Runner {
		r, err := binding.New(binding.Config{Topology: s.Topology, Bindings: []binding.Binding{paymentsBinding()}})
		require.NoError(t, err)
		require.NoError(t, r.Start(u.Context()))
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
		return r
	}

	first := run()
	seq := u.Publish("payments.succeeded", paymentMessage(700), "").Sequence
	u.Settled("PAYMENTS", "payments", seq)
	require.NoError(t, first.Stop(u.Context()))
	// The runner is gone; its consumer forgets what it acknowledged (as if
	// the acknowledgement had been lost), and a new runner takes over.
	require.NoError(t, u.JetStream().DeleteConsumer(u.Context(), "PAYMENTS", binding.ConsumerPrefix+"payments"))
	run()
	u.Settled("PAYMENTS", "payments", seq)

	key := dedup.ConnKey("payments", "PAYMENTS", seq)
	probe.Until(t, 60*time.Second, "the charge to complete", func() bool { return completedWithKey(t, s, key) == 1 })
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, s.Services.Payments.Charges())
}

func TestBindingKeysByNatsMsgID(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := stacktest.NewUserStreams(t, s)
	// The stream's own duplicate window is as short as the server allows:
	// the same Nats-Msg-Id soon makes a second message in it.
	u.Create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}, Duplicates: 100 * time.Millisecond})

	body := paymentMessage(800)
	firstSeq := u.Publish("payments.succeeded", body, "pay-1").Sequence
	var again *jetstream.PubAck
	probe.Until(t, 30*time.Second, "the stream to take pay-1 a second time", func() bool {
		again = u.Publish("payments.succeeded", body, "pay-1")
		return !again.Duplicate
	})
	require.Greater(t, again.Sequence, firstSeq, "two messages in the stream, one Nats-Msg-Id")
	other := u.Publish("payments.succeeded", paymentMessage(900), "pay-2").Sequence
	u.Settled("PAYMENTS", "payments", other)

	one, two := dedup.ConnMsgIDKey("payments", "pay-1"), dedup.ConnMsgIDKey("payments", "pay-2")
	probe.Until(t, 60*time.Second, "both charges to complete", func() bool {
		return completedWithKey(t, s, one) == 1 && completedWithKey(t, s, two) == 1
	})
	require.Equal(t, 2, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, s.Services.Payments.Charges())
	require.Equal(t, 3, stacktest.BindingCount(t, s, "payments", "published")+stacktest.BindingCount(t, s, "payments", "duplicate"))
}

func TestBindingSignalWithStart(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	u.Publish("payments.items", `{"type": "order.item_added", "order_id": 42, "sku": "a"}`, "item-a")
	last := u.Publish("payments.items", `{"type": "order.item_added", "order_id": 42, "sku": "b"}`, "").Sequence
	u.Settled("PAYMENTS", "payments", last)

	var id string
	probe.Until(t, 60*time.Second, "the order's execution", func() bool {
		return s.DB.QueryRow(context.Background(), `SELECT execution_id::text FROM executions WHERE workflow_id = 'order-42'`).Scan(&id) == nil
	})
	require.Equal(t, map[string]any{"items": []any{"a", "b"}}, stacktest.WaitCompleted(t, s, id)["result"], "started with start_input, completed by the two items")
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, stacktest.DBCount(t, s, `SELECT count(*) FROM signal_claims WHERE execution_id = $1::uuid AND idempotency_key = ANY($2)`,
		id, []string{dedup.ConnMsgIDKey("payments", "item-a"), dedup.ConnKey("payments", "PAYMENTS", last)}))
}

func TestBindingDeadLettersWithoutBlocking(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := stacktest.NewUserStreams(t, s)
	u.Create(jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"harvest.dead.>"}})
	u.Create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})

	badSeq := u.Publish("payments.succeeded", `{"type": "payment_intent.succeeded",`, "").Sequence
	goodSeq := u.Publish("payments.succeeded", paymentMessage(600), "").Sequence
	u.Settled("PAYMENTS", "payments", goodSeq)
	probe.Until(t, 60*time.Second, "the good message's charge", func() bool {
		return completedWithKey(t, s, dedup.ConnKey("payments", "PAYMENTS", goodSeq)) == 1
	})

	dead, err := u.JetStream().Stream(u.Context(), "DEAD")
	require.NoError(t, err)
	m, err := dead.GetLastMsgForSubject(u.Context(), "harvest.dead.payments")
	require.NoError(t, err)
	require.Equal(t, binding.ReasonInvalidJSON, m.Header.Get(binding.HeaderDeadReason))
	require.Equal(t, fmt.Sprint(badSeq), m.Header.Get(binding.HeaderStreamSeq))
	require.Equal(t, "PAYMENTS", m.Header.Get(binding.HeaderStream))
	require.Equal(t, `{"type": "payment_intent.succeeded",`, string(m.Data))
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, stacktest.BindingCount(t, s, "payments", "dead_lettered"))
}
