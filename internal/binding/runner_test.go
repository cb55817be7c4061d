package binding_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/poison"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// pgtest.Main also fails the run when goroutines leaked (goleak); the
// stack tests need its PostgreSQL.
func TestMain(m *testing.M) { pgtest.Main(m) }

// env is a NATS server with Harvest's topology and a user's stream ORDERS
// on orders.>, without a scheduler: the commands stay in HARVEST_CMD for
// the test to read.
type env struct {
	t   *testing.T
	ctx context.Context
	nc  *nats.Conn
	js  jetstream.JetStream
	top *broker.Topology
}

func newEnv(t *testing.T) *env {
	t.Helper()
	ns := natstest.RunServer(t, natstest.Options{})
	nc, js := natstest.Connect(t, ns)
	ctx := natstest.Context(t)
	top, err := broker.Declare(ctx, js, broker.Config{Shards: 4, MemoryStorage: true})
	require.NoError(t, err)
	e := &env{t: t, ctx: ctx, nc: nc, js: js, top: top}
	e.stream("ORDERS", 0, "orders.>")
	return e
}

// stream declares a stream; dup 0 is the server's default window.
func (e *env) stream(name string, dup time.Duration, subjects ...string) {
	e.t.Helper()
	_, err := e.js.CreateStream(e.ctx, jetstream.StreamConfig{Name: name, Subjects: subjects, Storage: jetstream.MemoryStorage, Duplicates: dup})
	require.NoError(e.t, err)
}

// runner starts a runner; it is stopped at cleanup (and may be stopped
// before).
func (e *env) runner(cfg binding.Config) (*binding.Runner, *prometheus.Registry) {
	e.t.Helper()
	reg := prometheus.NewRegistry()
	cfg.Topology, cfg.Metrics = e.top, reg
	if os.Getenv("HARVEST_TEST_BINDING_LOG") != "" { // the runners' logs on stderr, for debugging
		cfg.Logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug})).With("test", e.t.Name())
	}
	if cfg.PublishTimeout == 0 {
		cfg.PublishTimeout = 500 * time.Millisecond
	}
	if cfg.RetryDelay == 0 {
		cfg.RetryDelay, cfg.MaxRetryDelay = 50*time.Millisecond, 200*time.Millisecond
	}
	r, err := binding.New(cfg)
	require.NoError(e.t, err)
	require.NoError(e.t, r.Start(e.ctx))
	e.t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		require.NoError(e.t, r.Stop(ctx))
	})
	return r, reg
}

// publish stores a message in the user's stream and returns its sequence.
func (e *env) publish(subject, body string, header nats.Header) uint64 {
	e.t.Helper()
	ack, err := e.js.PublishMsg(e.ctx, &nats.Msg{Subject: subject, Data: []byte(body), Header: header})
	require.NoError(e.t, err)
	return ack.Sequence
}

// messages reads every message a stream holds, in order.
func (e *env) messages(stream string) []*jetstream.RawStreamMsg {
	e.t.Helper()
	s, err := e.js.Stream(e.ctx, stream)
	require.NoError(e.t, err)
	info, err := s.Info(e.ctx)
	require.NoError(e.t, err)
	var out []*jetstream.RawStreamMsg
	for seq := info.State.FirstSeq; info.State.Msgs > 0 && seq <= info.State.LastSeq; seq++ {
		m, err := s.GetMsg(e.ctx, seq)
		if errors.Is(err, jetstream.ErrMsgNotFound) {
			continue
		}
		require.NoError(e.t, err)
		out = append(out, m)
	}
	return out
}

// commands decodes the commands HARVEST_CMD holds.
func (e *env) commands() []wire.Command {
	e.t.Helper()
	var out []wire.Command
	for _, m := range e.messages(broker.CommandStream) {
		var c wire.Command
		require.NoError(e.t, json.Unmarshal(m.Data, &c))
		out = append(out, c)
	}
	return out
}

// consumer reads a binding's consumer, or nil if it does not exist.
func (e *env) consumer(stream, name string) *jetstream.ConsumerInfo {
	e.t.Helper()
	c, err := e.js.Consumer(e.ctx, stream, name)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	require.NoError(e.t, err)
	info, err := c.Info(e.ctx)
	if errors.Is(err, jetstream.ErrConsumerNotFound) {
		return nil
	}
	require.NoError(e.t, err)
	return info
}

// settled waits until a consumer has acknowledged (or terminated) every
// message up to seq.
func (e *env) settled(stream, name string, seq uint64) {
	e.t.Helper()
	probe.Until(e.t, 30*time.Second, fmt.Sprintf("consumer %s to acknowledge up to %d", name, seq), func() bool {
		info := e.consumer(stream, name)
		return info != nil && info.AckFloor.Stream >= seq && info.NumAckPending == 0
	})
}

// count reads harvest_binding_messages_total{binding, result}.
func count(t *testing.T, reg *prometheus.Registry, name, result string) int {
	t.Helper()
	return int(probe.Value(t, reg, "harvest_binding_messages_total", "binding", name, "result", result))
}

func ordersBinding() binding.Binding {
	return binding.Binding{Name: "orders", Stream: "ORDERS", Subject: "orders.>", Rules: []webhook.Rule{
		{Event: "order.created", Workflow: "fulfil", InputPointer: "/order"},
		{Event: "order.item_added", Workflow: "collect", Signal: "item", WorkflowID: "order-{/order_id}", InputPointer: "/item",
			StartInput: map[string]any{"count": 2}},
	}}
}

func TestMessagesBecomeKeyedCommands(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}})

	s1 := e.publish("orders.created", `{"type": "order.created", "order": {"id": 1}}`, nil)
	e.publish("orders.created", `{"type": "order.created", "order": {"id": 2}}`, nats.Header{"Nats-Msg-Id": {"evt-2"}})
	e.publish("orders.items", `{"type": "order.item_added", "order_id": 7, "item": {"sku": "a"}}`, nats.Header{"Nats-Msg-Id": {"item-1"}})
	last := e.publish("orders.other", `{"type": "order.viewed"}`, nil)
	e.settled("ORDERS", "harvest_bind_orders", last)

	cmds := e.commands()
	require.Len(t, cmds, 3, "the ignored event makes no command")
	keyed := map[string]wire.Command{}
	for _, c := range cmds {
		if c.Kind == wire.KindStart {
			keyed[c.Start.IdempotencyKey] = c
		} else {
			keyed[c.Signal.IdempotencyKey] = c
		}
	}
	byCoords := keyed[dedup.ConnKey("orders", "ORDERS", s1)]
	require.Equal(t, "fulfil", byCoords.Start.WorkflowName, "a message without Nats-Msg-Id is keyed by its coordinates")
	require.JSONEq(t, `{"id": 1}`, string(byCoords.Start.Input))
	require.Equal(t, dedup.StartCommandID("fulfil", dedup.ConnKey("orders", "ORDERS", s1)), byCoords.CommandID)

	byID := keyed[dedup.ConnMsgIDKey("orders", "evt-2")]
	require.Equal(t, "fulfil", byID.Start.WorkflowName, "a message with Nats-Msg-Id is keyed by it")
	require.JSONEq(t, `{"id": 2}`, string(byID.Start.Input))

	sws := keyed[dedup.ConnMsgIDKey("orders", "item-1")]
	require.True(t, sws.SignalWithStart)
	require.Equal(t, "order-7", sws.Start.WorkflowID)
	require.JSONEq(t, `{"count": 2}`, string(sws.Start.Input))
	require.Equal(t, "item", sws.Signal.SignalName)
	require.JSONEq(t, `{"sku": "a"}`, string(sws.Signal.Payload))

	require.Equal(t, 3, count(t, reg, "orders", "published"))
	require.Equal(t, 1, count(t, reg, "orders", "ignored"))
	require.Equal(t, 0, count(t, reg, "orders", "dead_lettered"))
}

// TestARulesStartGoesToItsWorkflowsTaskQueue: a rule's start, and a
// signal-with-start's, go to the task queue configured for the rule's
// workflow; a workflow with none starts on the default queue.
func TestARulesStartGoesToItsWorkflowsTaskQueue(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}, TaskQueues: map[string]string{"collect": "mine"}})

	e.publish("orders.created", `{"type": "order.created", "order": {"id": 1}}`, nil)
	last := e.publish("orders.items", `{"type": "order.item_added", "order_id": 7, "item": {"sku": "a"}}`, nil)
	e.settled("ORDERS", "harvest_bind_orders", last)

	queues := map[string]string{}
	for _, c := range e.commands() {
		queues[c.Start.WorkflowName] = c.Start.TaskQueue
	}
	require.Equal(t, map[string]string{"fulfil": wire.DefaultTaskQueue, "collect": "mine"}, queues)
}

func TestARedeliveredMessageMakesTheSameCommand(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, reg := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}})
	seq := e.publish("orders.created", `{"type": "order.created", "order": {"id": 1}}`, nil)
	e.settled("ORDERS", "harvest_bind_orders", seq)
	require.Len(t, e.commands(), 1)

	// The consumer vanishes under the running binding, which makes it
	// again: every message of the stream is delivered again, at the same
	// coordinates, so it makes the same command, which the broker drops.
	require.NoError(t, e.js.DeleteConsumer(e.ctx, "ORDERS", "harvest_bind_orders"))
	probe.Until(t, 30*time.Second, "the redelivery to be published as a duplicate", func() bool {
		return count(t, reg, "orders", "duplicate") == 1
	})
	e.settled("ORDERS", "harvest_bind_orders", seq)
	cmds := e.commands()
	require.Len(t, cmds, 2, "the command, and the report of its duplicate")
	require.Equal(t, dedup.ConnKey("orders", "ORDERS", seq), cmds[0].Start.IdempotencyKey)
	require.Equal(t, 1, count(t, reg, "orders", "published"))
	// The report is for the scheduler to count the duplicate against the
	// key (bindings never write PostgreSQL).
	require.Equal(t, wire.KindDuplicate, cmds[1].Kind)
	require.Equal(t, &wire.DuplicateCommand{Layer: wire.DuplicateBroker, WorkflowName: "fulfil", IdempotencyKey: cmds[0].Start.IdempotencyKey}, cmds[1].Duplicate)
	require.Equal(t, binding.Counts{Published: 1, Duplicate: 1}, r.Counts("orders"), "what the webhooks page shows")
}

func TestUnusableMessagesAreDeadLetteredWithoutBlocking(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.stream("DEAD", 0, "harvest.dead.>")
	core := ordersBinding()
	core.Name, core.Subject, core.DeadLetterSubject = "core", "orders.core", "dead.core"
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding(), core}})

	bad := []struct{ body, reason, err string }{
		{`not json`, binding.ReasonInvalidJSON, "the message is not JSON"},
		{`{"kind": "order.created"}`, binding.ReasonMissingEventType, "the message has no event type"},
		{`{"type": "order.item_added", "item": {"sku": "a"}}`, binding.ReasonUnroutable, `template "order-{/order_id}"`},
		{`{"type": "order.created", "order": {"id": 3}}`, binding.ReasonInvalidMsgID, "over 512"},
	}
	seqs := make([]uint64, len(bad))
	for i, b := range bad {
		h := nats.Header{"X-Trace": {fmt.Sprint("trace-", i)}}
		if b.reason == binding.ReasonInvalidMsgID {
			h.Set("Nats-Msg-Id", strings.Repeat("x", 600))
		}
		seqs[i] = e.publish("orders.created", b.body, h)
	}
	// A valid message behind them is processed all the same.
	last := e.publish("orders.created", `{"type": "order.created", "order": {"id": 4}}`, nil)
	e.settled("ORDERS", "harvest_bind_orders", last)
	cmds := e.commands()
	require.Len(t, cmds, 1)
	require.JSONEq(t, `{"id": 4}`, string(cmds[0].Start.Input))

	dead := e.messages("DEAD")
	require.Len(t, dead, len(bad), "a stream captures the dead-letter subject: each dead letter is in it")
	for i, m := range dead {
		require.Equal(t, "harvest.dead.orders", m.Subject)
		require.Equal(t, bad[i].body, string(m.Data))
		require.Equal(t, bad[i].reason, m.Header.Get(binding.HeaderDeadReason))
		require.Contains(t, m.Header.Get(binding.HeaderDeadError), bad[i].err)
		require.Equal(t, "orders", m.Header.Get(binding.HeaderBinding))
		require.Equal(t, "ORDERS", m.Header.Get(binding.HeaderStream))
		require.Equal(t, fmt.Sprint(seqs[i]), m.Header.Get(binding.HeaderStreamSeq))
		require.Equal(t, "orders.created", m.Header.Get(binding.HeaderSubject))
		require.Equal(t, "1", m.Header.Get(binding.HeaderDeliveries), "a message that can never become a command is not tried again")
		require.Equal(t, fmt.Sprint("trace-", i), m.Header.Get("X-Trace"), "the message's own headers travel along")
		require.Equal(t, dedup.ConnKey("orders", "ORDERS", seqs[i]), m.Header.Get("Nats-Msg-Id"), "dead letters are deduplicated by coordinates")
	}
	require.Len(t, dead[3].Header.Get(binding.HeaderMsgID), 600)
	require.Equal(t, 4, count(t, reg, "orders", "dead_lettered"))
	require.Equal(t, 1, count(t, reg, "orders", "published"))

	// Without a stream on the subject the dead letter is a core message.
	sub, err := e.nc.SubscribeSync("dead.core")
	require.NoError(t, err)
	require.NoError(t, e.nc.Flush())
	seq := e.publish("orders.core", `{"type": 1}`, nil)
	m, err := sub.NextMsg(30 * time.Second)
	require.NoError(t, err)
	require.Equal(t, binding.ReasonMissingEventType, m.Header.Get(binding.HeaderDeadReason))
	require.Equal(t, "core", m.Header.Get(binding.HeaderBinding))
	require.Equal(t, fmt.Sprint(seq), m.Header.Get(binding.HeaderStreamSeq))
	e.settled("ORDERS", "harvest_bind_core", seq)
}

// TestUnstorableMessagesAreDeadLettered: a routed message whose body, key
// or workflow_id PostgreSQL cannot store is dead-lettered with the reason,
// before any command is published, and the binding goes on.
func TestUnstorableMessagesAreDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.stream("DEAD", 0, "harvest.dead.>")
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}})

	type msg struct {
		body, msgID, reason, err string
	}
	var bad []msg
	for _, c := range poison.Classic {
		bad = append(bad, msg{body: `{"type": "order.created", "order": ` + c.JSON + `}`, reason: binding.ReasonUnstorable, err: "which Harvest cannot store"})
	}
	bad = append(bad,
		msg{body: `{"type": "order.created", "order": {"id": "\u0000"}}`, reason: binding.ReasonUnstorable, err: "at /order/id: string holds U+0000"},
		msg{body: `{"type": "order.created", "note": "\ud800", "order": {}}`, reason: binding.ReasonUnstorable, err: "at /note:"},
		msg{body: `{"type": "order.created", "order": {"id": 5}}`, msgID: "evt\xff", reason: binding.ReasonInvalidMsgID, err: "not UTF-8"},
		msg{body: `{"type": "order.created", "order": {"id": 6}}`, msgID: "evt\t6", reason: binding.ReasonInvalidMsgID, err: "control character"},
		msg{body: `{"type": "order.item_added", "order_id": "a\nb", "item": {}}`, reason: binding.ReasonUnroutable, err: "control character U+000A"},
	)
	// A body near the server's max payload leaves the dead letter no room
	// for its headers: it goes without the body.
	huge := `{"type": "order.created", "order": "` + strings.Repeat("x", int(e.nc.MaxPayload())-200) + `\u0000"}`
	bad = append(bad, msg{body: huge, reason: binding.ReasonUnstorable, err: "at /order: string holds U+0000"})
	for _, b := range bad {
		var h nats.Header
		if b.msgID != "" {
			h = nats.Header{"Nats-Msg-Id": {b.msgID}}
		}
		e.publish("orders.created", b.body, h)
	}
	// An event no rule routes is ignored, whatever it holds; a valid
	// message behind them all is processed.
	e.publish("orders.created", `{"type": "order.viewed", "x": "\u0000"}`, nil)
	last := e.publish("orders.created", `{"type": "order.created", "order": {"id": 4}}`, nil)
	e.settled("ORDERS", "harvest_bind_orders", last)
	cmds := e.commands()
	require.Len(t, cmds, 1)
	require.JSONEq(t, `{"id": 4}`, string(cmds[0].Start.Input))

	dead := e.messages("DEAD")
	require.Len(t, dead, len(bad))
	for i, m := range dead {
		require.Equal(t, bad[i].reason, m.Header.Get(binding.HeaderDeadReason), m.Header.Get(binding.HeaderDeadError))
		require.Contains(t, m.Header.Get(binding.HeaderDeadError), bad[i].err)
		if bad[i].body == huge {
			require.Empty(t, m.Data)
			require.Equal(t, fmt.Sprint(len(huge)), m.Header.Get(binding.HeaderBodyOmitted))
			continue
		}
		require.Equal(t, bad[i].body, string(m.Data))
		require.Empty(t, m.Header.Get(binding.HeaderBodyOmitted))
	}
	require.Equal(t, len(bad), count(t, reg, "orders", "dead_lettered"))
	require.Equal(t, 1, count(t, reg, "orders", "ignored"))
}

func TestAMessageIsAcknowledgedOnlyAfterItsCommandIsPublished(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := ordersBinding()
	b.MaxDeliver = 1000
	// The command stream is gone: every publication of a command fails.
	require.NoError(t, e.js.DeleteStream(e.ctx, broker.CommandStream))
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{b}, PublishTimeout: 200 * time.Millisecond})
	seq := e.publish("orders.created", `{"type": "order.created", "order": {"id": 1}}`, nil)

	probe.Until(t, 30*time.Second, "three failed deliveries", func() bool {
		info := e.consumer("ORDERS", "harvest_bind_orders")
		return info != nil && info.Delivered.Consumer >= 3
	})
	info := e.consumer("ORDERS", "harvest_bind_orders")
	require.Zero(t, info.AckFloor.Stream, "not acknowledged while its command is not published")
	require.Equal(t, 1, info.NumAckPending)
	require.Positive(t, info.NumRedelivered)
	require.GreaterOrEqual(t, count(t, reg, "orders", "retried"), 2)

	// JetStream takes commands again: the next delivery goes through.
	_, err := broker.Declare(e.ctx, e.js, broker.Config{Shards: 4, MemoryStorage: true})
	require.NoError(t, err)
	e.settled("ORDERS", "harvest_bind_orders", seq)
	cmds := e.commands()
	require.Len(t, cmds, 1)
	require.Equal(t, dedup.ConnKey("orders", "ORDERS", seq), cmds[0].Start.IdempotencyKey)
	require.Equal(t, 1, count(t, reg, "orders", "published"))
	require.Zero(t, count(t, reg, "orders", "dead_lettered"))
}

func TestAfterMaxDeliverTheMessageIsDeadLettered(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	e.stream("DEAD", 0, "harvest.dead.>")
	b := ordersBinding()
	b.MaxDeliver = 3
	require.NoError(t, e.js.DeleteStream(e.ctx, broker.CommandStream))
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{b}, PublishTimeout: 200 * time.Millisecond})
	seq := e.publish("orders.created", `{"type": "order.created", "order": {"id": 1}}`, nats.Header{"Nats-Msg-Id": {"evt-1"}})

	e.settled("ORDERS", "harvest_bind_orders", seq)
	dead := e.messages("DEAD")
	require.Len(t, dead, 1)
	require.Equal(t, binding.ReasonUnavailable, dead[0].Header.Get(binding.HeaderDeadReason))
	require.Contains(t, dead[0].Header.Get(binding.HeaderDeadError), "command not published in 3 deliveries")
	require.Equal(t, "3", dead[0].Header.Get(binding.HeaderDeliveries))
	require.Equal(t, "evt-1", dead[0].Header.Get(binding.HeaderMsgID))
	require.Equal(t, 2, count(t, reg, "orders", "retried"))
	require.Equal(t, 1, count(t, reg, "orders", "dead_lettered"))
	info := e.consumer("ORDERS", "harvest_bind_orders")
	require.EqualValues(t, 3, info.Delivered.Consumer, "no delivery after the dead letter")
}

func TestAMessageThatCannotBeDeadLetteredIsKept(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	// The dead-letter stream takes one message, then refuses.
	_, err := e.js.CreateStream(e.ctx, jetstream.StreamConfig{Name: "DEAD", Subjects: []string{"harvest.dead.>"},
		Storage: jetstream.MemoryStorage, MaxMsgs: 1, Discard: jetstream.DiscardNew})
	require.NoError(t, err)
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}})
	first := e.publish("orders.created", `first`, nil)
	e.settled("ORDERS", "harvest_bind_orders", first)
	second := e.publish("orders.created", `second`, nil)
	probe.Until(t, 30*time.Second, "the dead letter to be refused twice", func() bool {
		return count(t, reg, "orders", "retried") >= 2
	})
	info := e.consumer("ORDERS", "harvest_bind_orders")
	require.Equal(t, first, info.AckFloor.Stream, "the message is kept")
	require.Equal(t, 1, count(t, reg, "orders", "dead_lettered"))

	// Room again: the next delivery dead-letters it.
	s, err := e.js.Stream(e.ctx, "DEAD")
	require.NoError(t, err)
	require.NoError(t, s.Purge(e.ctx))
	e.settled("ORDERS", "harvest_bind_orders", second)
	dead := e.messages("DEAD")
	require.Len(t, dead, 1)
	require.Equal(t, "second", string(dead[0].Data))
	require.Equal(t, 2, count(t, reg, "orders", "dead_lettered"))
}

func TestABindingWaitsForItsStream(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	b := ordersBinding()
	b.Name, b.Stream, b.Subject = "late", "LATE", "late.>"
	_, reg := e.runner(binding.Config{Bindings: []binding.Binding{b}})
	// The services that own the stream start after Harvest.
	e.stream("LATE", 0, "late.>")
	seq := e.publish("late.created", `{"type": "order.created", "order": {"id": 1}}`, nil)
	e.settled("LATE", "harvest_bind_late", seq)
	require.Len(t, e.commands(), 1)
	require.Equal(t, 1, count(t, reg, "late", "published"))
}

func TestRunnerLifecycle(t *testing.T) {
	t.Parallel()
	e := newEnv(t)
	r, _ := e.runner(binding.Config{Bindings: []binding.Binding{ordersBinding()}})
	require.Error(t, r.Start(e.ctx), "started twice")
	require.NoError(t, r.Stop(e.ctx))
	require.NoError(t, r.Stop(e.ctx), "stopped twice")

	_, err := binding.New(binding.Config{})
	require.ErrorContains(t, err, "Topology is required")
	_, err = binding.New(binding.Config{Topology: e.top, AckWait: 2 * time.Second, PublishTimeout: time.Second})
	require.ErrorContains(t, err, "AckWait 2s: want more than twice PublishTimeout")
	_, err = binding.New(binding.Config{Topology: e.top, Bindings: []binding.Binding{{Name: "x"}}})
	require.ErrorContains(t, err, `binding "x": stream is required`)
}
