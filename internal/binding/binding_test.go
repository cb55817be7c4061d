package binding_test

import (
	"strings"
	"testing"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/webhook"
)

func valid() binding.Binding {
	return binding.Binding{Name: "orders", Stream: "ORDERS", Subject: "orders.created",
		Rules: []webhook.Rule{{Event: "order.created", Workflow: "fulfil"}}}
}

func TestValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name   string
		change func(b *binding.Binding)
		err    string
	}{
		{"valid", func(*binding.Binding) {}, ""},
		{"wildcard filter", func(b *binding.Binding) { b.Subject = "orders.*.>" }, ""},
		{"fixed event type", func(b *binding.Binding) { b.EventType = "order.created" }, ""},
		{"all options", func(b *binding.Binding) {
			b.EventPointer, b.MaxDeliver, b.DeadLetterSubject, b.Deliver = "/meta/kind", 3, "dead.orders", binding.DeliverNew
		}, ""},
		{"no name", func(b *binding.Binding) { b.Name = "" }, "binding name: invalid name"},
		{"bad name", func(b *binding.Binding) { b.Name = "or.ders" }, `binding name: invalid name "or.ders"`},
		{"no stream", func(b *binding.Binding) { b.Stream = "" }, `binding "orders": stream is required`},
		{"bad stream", func(b *binding.Binding) { b.Stream = "OR.DERS" }, `binding "orders": stream "OR.DERS"`},
		{"harvest stream", func(b *binding.Binding) { b.Stream = "HARVEST_CMD" }, "Harvest's own streams"},
		{"no subject", func(b *binding.Binding) { b.Subject = "" }, `binding "orders": subject is required`},
		{"empty token", func(b *binding.Binding) { b.Subject = "orders..created" }, `subject "orders..created"`},
		{"inner >", func(b *binding.Binding) { b.Subject = "orders.>.x" }, `subject "orders.>.x"`},
		{"partial *", func(b *binding.Binding) { b.Subject = "orders.c*" }, `subject "orders.c*"`},
		{"space", func(b *binding.Binding) { b.Subject = "orders created" }, `subject "orders created"`},
		{"both event choices", func(b *binding.Binding) { b.EventPointer, b.EventType = "/type", "x" }, "event_pointer and event_type exclude each other"},
		{"bad pointer", func(b *binding.Binding) { b.EventPointer = "type" }, `event_pointer "type"`},
		{"negative max_deliver", func(b *binding.Binding) { b.MaxDeliver = -1 }, "max_deliver -1"},
		{"bad deliver", func(b *binding.Binding) { b.Deliver = "last" }, `deliver "last"`},
		{"no rules", func(b *binding.Binding) { b.Rules = nil }, "rules: at least one rule is required"},
		{"rule without event", func(b *binding.Binding) { b.Rules[0].Event = "" }, "rules[0]: event is required"},
		{"rule without workflow", func(b *binding.Binding) { b.Rules[0].Workflow = "" }, "rules[0]: workflow is required"},
		{"signal without template", func(b *binding.Binding) { b.Rules[0].Signal = "item" }, "rules[0]: a signal rule needs a workflow_id template"},
		{"wildcard dead letter", func(b *binding.Binding) { b.DeadLetterSubject = "dead.*" }, `dead_letter_subject "dead.*"`},
		{"dead letter loops", func(b *binding.Binding) { b.Subject, b.DeadLetterSubject = "orders.>", "orders.dead" }, "dead letters would come back"},
		{"default dead letter loops", func(b *binding.Binding) { b.Subject = "harvest.dead.*" }, "matches the default dead_letter_subject"},
		{"dead letter into commands", func(b *binding.Binding) { b.DeadLetterSubject = "harvest.cmd.0.start" }, "reserved"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := valid()
			b.Rules = append([]webhook.Rule(nil), b.Rules...)
			tc.change(&b)
			err := b.Validate()
			if tc.err == "" {
				require.NoError(t, err)
				return
			}
			require.ErrorContains(t, err, tc.err)
		})
	}
	require.ErrorContains(t, binding.ValidateAll([]binding.Binding{valid(), valid()}), `binding "orders" is declared twice`)
}

func TestDefaults(t *testing.T) {
	t.Parallel()
	b := valid().WithDefaults()
	require.Equal(t, "/type", b.EventPointer)
	require.Equal(t, 5, b.MaxDeliver)
	require.Equal(t, "harvest.dead.orders", b.DeadLetterSubject)
	require.Equal(t, "harvest_bind_orders", b.ConsumerName())
	fixed := valid()
	fixed.EventType = "order.created"
	require.Empty(t, fixed.WithDefaults().EventPointer, "a fixed event type needs no pointer")
}

func TestEvent(t *testing.T) {
	t.Parallel()
	b := valid()
	ev, typ, err := b.Event([]byte(`{"type": "order.created", "n": 12345678901234567890}`))
	require.NoError(t, err)
	require.Equal(t, "order.created", typ)
	require.Equal(t, "12345678901234567890", ev.(map[string]any)["n"].(interface{ String() string }).String(), "numbers keep their digits")

	for body, want := range map[string]error{
		``:                     binding.ErrInvalidJSON,
		`{"type": "x"`:         binding.ErrInvalidJSON,
		`{"type": "x"} {}`:     binding.ErrInvalidJSON,
		`not json`:             binding.ErrInvalidJSON,
		`{"kind": "x"}`:        binding.ErrMissingEventType,
		`{"type": 3}`:          binding.ErrMissingEventType,
		`{"type": ""}`:         binding.ErrMissingEventType,
		`["order.created"]`:    binding.ErrMissingEventType,
		`"order.created"`:      binding.ErrMissingEventType,
		`{"type": null}`:       binding.ErrMissingEventType,
		`{"type": {"a": 1}}`:   binding.ErrMissingEventType,
		`{"type": ["x", "y"]}`: binding.ErrMissingEventType,
	} {
		_, _, err := b.Event([]byte(body))
		require.ErrorIs(t, err, want, "body %q", body)
	}

	b.EventPointer = "/meta/kind"
	_, typ, err = b.Event([]byte(`{"meta": {"kind": "k"}}`))
	require.NoError(t, err)
	require.Equal(t, "k", typ)

	b.EventPointer, b.EventType = "", "fixed"
	_, typ, err = b.Event([]byte(`[1, 2]`))
	require.NoError(t, err)
	require.Equal(t, "fixed", typ, "a fixed type needs no field, nor an object")
	_, _, err = b.Event([]byte(`[1, 2`))
	require.ErrorIs(t, err, binding.ErrInvalidJSON)
}

func TestMessageKey(t *testing.T) {
	t.Parallel()
	key, err := binding.MessageKey("orders", "ORDERS", 7, nil)
	require.NoError(t, err)
	require.Equal(t, dedup.ConnKey("orders", "ORDERS", 7), key, "no Nats-Msg-Id: the coordinates")
	key, err = binding.MessageKey("orders", "ORDERS", 7, nats.Header{"Nats-Msg-Id": {"evt-1"}})
	require.NoError(t, err)
	require.Equal(t, dedup.ConnMsgIDKey("orders", "evt-1"), key, "the Nats-Msg-Id, whatever the coordinates")
	other, err := binding.MessageKey("orders", "ORDERS", 8, nats.Header{"Nats-Msg-Id": {"evt-1"}})
	require.NoError(t, err)
	require.Equal(t, key, other)
	_, err = binding.MessageKey("orders", "ORDERS", 7, nats.Header{"Nats-Msg-Id": {strings.Repeat("x", dedup.MaxKeyBytes)}})
	require.ErrorContains(t, err, "over 512")
}
