package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

func TestLoadBindings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
bindings:
  - name: orders
    stream: ORDERS
    subject: orders.created
    max_deliver: 3
    dead_letter_subject: dead.orders
    rules:
      - event: order.created
        workflow: fulfil
        input_pointer: /order
  - name: items
    stream: ORDERS
    subject: orders.items.>
    event_type: order.item_added
    deliver: new
    rules:
      - event: order.item_added
        workflow: collect
        signal: item
        workflow_id: "order-{/order_id}"
        start_input: {count: 2}
`), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Len(t, c.Bindings, 2)
	b := c.Bindings[0]
	require.Equal(t, "orders", b.Name)
	require.Equal(t, "ORDERS", b.Stream)
	require.Equal(t, "orders.created", b.Subject)
	require.Equal(t, 3, b.MaxDeliver)
	require.Equal(t, "dead.orders", b.DeadLetterSubject)
	require.Equal(t, "/order", b.Rules[0].InputPointer)
	require.Equal(t, "order.item_added", c.Bindings[1].EventType)
	require.Equal(t, "new", c.Bindings[1].Deliver)
	require.Equal(t, map[string]any{"count": 2}, c.Bindings[1].Rules[0].StartInput)

	for yaml, want := range map[string]string{
		"bindings:\n  - name: orders\n    stream: ORDERS\n    rules: [{event: a, workflow: w}]\n":                                 `config: binding "orders": subject is required`,
		"bindings:\n  - name: orders\n    stream: ORDERS\n    subject: o.>\n":                                                     `config: binding "orders": rules: at least one rule is required`,
		"bindings:\n  - name: orders\n    stream: ORDERS\n    subject: o.>\n    rules: [{event: a, workflow: w}]\n    topic: x\n": "topic",
	} {
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want)
	}
}
