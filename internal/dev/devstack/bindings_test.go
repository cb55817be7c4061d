package devstack_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// userStreams is the side of the users' services: their own JetStream
// streams on the stack's NATS server, and their publishers.
type userStreams struct {
	t   *testing.T
	ctx context.Context
	js  jetstream.JetStream
}

func newUserStreams(t *testing.T, s *devstack.Stack) *userStreams {
	t.Helper()
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return &userStreams{t: t, ctx: ctx, js: js}
}

func (u *userStreams) create(cfg jetstream.StreamConfig) {
	u.t.Helper()
	_, err := u.js.CreateStream(u.ctx, cfg)
	require.NoError(u.t, err)
}

func (u *userStreams) publish(subject, body, msgID string) *jetstream.PubAck {
	u.t.Helper()
	m := &nats.Msg{Subject: subject, Data: []byte(body), Header: nats.Header{}}
	if msgID != "" {
		m.Header.Set(jetstream.MsgIDHeader, msgID)
	}
	ack, err := u.js.PublishMsg(u.ctx, m)
	require.NoError(u.t, err)
	return ack
}

// settled waits until the binding's consumer exists and has acknowledged
// (or terminated) every message up to seq.
func (u *userStreams) settled(stream, name string, seq uint64) {
	u.t.Helper()
	eventually(u.t, 60*time.Second, fmt.Sprintf("binding %s to acknowledge up to %d", name, seq), func() bool {
		c, err := u.js.Consumer(u.ctx, stream, binding.ConsumerPrefix+name)
		if errors.Is(err, jetstream.ErrConsumerNotFound) || errors.Is(err, jetstream.ErrStreamNotFound) {
			return false
		}
		require.NoError(u.t, err)
		info := c.CachedInfo()
		return info.AckFloor.Stream >= seq && info.NumAckPending == 0
	})
}

// bindingCount reads harvest_binding_messages_total{binding, result} from
// the stack's /metrics.
func bindingCount(t *testing.T, s *devstack.Stack, name, result string) int {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	prefix := fmt.Sprintf("harvest_binding_messages_total{binding=%q,result=%q} ", name, result)
	for line := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(line, prefix); ok {
			var n int
			_, err := fmt.Sscan(v, &n)
			require.NoError(t, err)
			return n
		}
	}
	t.Fatalf("no %s in /metrics", strings.TrimSpace(prefix))
	return 0
}

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
	return dbCount(t, s, `SELECT count(*) FROM executions WHERE status = 'Completed' AND idempotency_key = $1`, key)
}

func TestBindingStartsOneExecutionPerMessage(t *testing.T) {
	t.Parallel()
	// The binding's stream does not exist when the stack starts: the
	// stack starts all the same, and the binding waits for the stream.
	s := startStack(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := newUserStreams(t, s)
	u.create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})

	seq := u.publish("payments.succeeded", paymentMessage(500), "").Sequence
	key := dedup.ConnKey("payments", "PAYMENTS", seq)
	eventually(t, 60*time.Second, "the charge to complete", func() bool { return completedWithKey(t, s, key) == 1 })
	u.settled("PAYMENTS", "payments", seq)
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, s.Services.Payments.Charges())
	require.Equal(t, 1, bindingCount(t, s, "payments", "published"))

	// The same stream message again: its consumer is reset, so the binding
	// makes it anew and takes the stream from its start. Same
	// coordinates, same key: no second execution.
	require.NoError(t, u.js.DeleteConsumer(u.ctx, "PAYMENTS", binding.ConsumerPrefix+"payments"))
	u.settled("PAYMENTS", "payments", seq)
	require.Equal(t, 1, bindingCount(t, s, "payments", "duplicate"), "the redelivery made the same command")
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, completedWithKey(t, s, key))
	require.Equal(t, 1, s.Services.Payments.Charges())

	// API callers cannot write into the bindings' key namespace.
	require.Equal(t, 400, start(t, s, "charge", key, `{`+chargeInput+`}`).status)
}

func TestBindingRestartMakesOneExecution(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	u := newUserStreams(t, s)
	u.create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	run := func() *binding.Runner {
		r, err := binding.New(binding.Config{Topology: s.Topology, Bindings: []binding.Binding{paymentsBinding()}})
		require.NoError(t, err)
		require.NoError(t, r.Start(u.ctx))
		t.Cleanup(func() { require.NoError(t, r.Stop(context.Background())) })
		return r
	}

	first := run()
	seq := u.publish("payments.succeeded", paymentMessage(700), "").Sequence
	u.settled("PAYMENTS", "payments", seq)
	require.NoError(t, first.Stop(u.ctx))
	// The runner is gone; its consumer forgets what it acknowledged (as if
	// the acknowledgement had been lost), and a new runner takes over.
	require.NoError(t, u.js.DeleteConsumer(u.ctx, "PAYMENTS", binding.ConsumerPrefix+"payments"))
	run()
	u.settled("PAYMENTS", "payments", seq)

	key := dedup.ConnKey("payments", "PAYMENTS", seq)
	eventually(t, 60*time.Second, "the charge to complete", func() bool { return completedWithKey(t, s, key) == 1 })
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, s.Services.Payments.Charges())
}

func TestBindingKeysByNatsMsgID(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := newUserStreams(t, s)
	// The stream's own duplicate window is as short as the server allows:
	// the same Nats-Msg-Id soon makes a second message in it.
	u.create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}, Duplicates: 100 * time.Millisecond})

	body := paymentMessage(800)
	firstSeq := u.publish("payments.succeeded", body, "pay-1").Sequence
	var again *jetstream.PubAck
	eventually(t, 30*time.Second, "the stream to take pay-1 a second time", func() bool {
		again = u.publish("payments.succeeded", body, "pay-1")
		return !again.Duplicate
	})
	require.Greater(t, again.Sequence, firstSeq, "two messages in the stream, one Nats-Msg-Id")
	other := u.publish("payments.succeeded", paymentMessage(900), "pay-2").Sequence
	u.settled("PAYMENTS", "payments", other)

	one, two := dedup.ConnMsgIDKey("payments", "pay-1"), dedup.ConnMsgIDKey("payments", "pay-2")
	eventually(t, 60*time.Second, "both charges to complete", func() bool {
		return completedWithKey(t, s, one) == 1 && completedWithKey(t, s, two) == 1
	})
	require.Equal(t, 2, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, s.Services.Payments.Charges())
	require.Equal(t, 3, bindingCount(t, s, "payments", "published")+bindingCount(t, s, "payments", "duplicate"))
}

func TestBindingSignalWithStart(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := newUserStreams(t, s)
	u.create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})
	u.publish("payments.items", `{"type": "order.item_added", "order_id": 42, "sku": "a"}`, "item-a")
	last := u.publish("payments.items", `{"type": "order.item_added", "order_id": 42, "sku": "b"}`, "").Sequence
	u.settled("PAYMENTS", "payments", last)

	var id string
	eventually(t, 60*time.Second, "the order's execution", func() bool {
		return s.DB.QueryRow(context.Background(), `SELECT execution_id::text FROM executions WHERE workflow_id = 'order-42'`).Scan(&id) == nil
	})
	require.Equal(t, map[string]any{"items": []any{"a", "b"}}, waitCompleted(t, s, id)["result"], "started with start_input, completed by the two items")
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 2, dbCount(t, s, `SELECT count(*) FROM signal_claims WHERE execution_id = $1::uuid AND idempotency_key = ANY($2)`,
		id, []string{dedup.ConnMsgIDKey("payments", "item-a"), dedup.ConnKey("payments", "PAYMENTS", last)}))
}

func TestBindingDeadLettersWithoutBlocking(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{Bindings: []binding.Binding{paymentsBinding()}})
	u := newUserStreams(t, s)
	u.create(jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"harvest.dead.>"}})
	u.create(jetstream.StreamConfig{Name: "PAYMENTS", Subjects: []string{"payments.>"}})

	badSeq := u.publish("payments.succeeded", `{"type": "payment_intent.succeeded",`, "").Sequence
	goodSeq := u.publish("payments.succeeded", paymentMessage(600), "").Sequence
	u.settled("PAYMENTS", "payments", goodSeq)
	eventually(t, 60*time.Second, "the good message's charge", func() bool {
		return completedWithKey(t, s, dedup.ConnKey("payments", "PAYMENTS", goodSeq)) == 1
	})

	dead, err := u.js.Stream(u.ctx, "DEAD")
	require.NoError(t, err)
	m, err := dead.GetLastMsgForSubject(u.ctx, "harvest.dead.payments")
	require.NoError(t, err)
	require.Equal(t, binding.ReasonInvalidJSON, m.Header.Get(binding.HeaderDeadReason))
	require.Equal(t, fmt.Sprint(badSeq), m.Header.Get(binding.HeaderStreamSeq))
	require.Equal(t, "PAYMENTS", m.Header.Get(binding.HeaderStream))
	require.Equal(t, `{"type": "payment_intent.succeeded",`, string(m.Data))
	require.Equal(t, 1, dbCount(t, s, `SELECT count(*) FROM executions`))
	require.Equal(t, 1, bindingCount(t, s, "payments", "dead_lettered"))
}
