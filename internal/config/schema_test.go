package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

func TestWebhookPayloadSchemaFromYAML(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	write := func(schema string) {
		require.NoError(t, os.WriteFile(path, []byte(`
webhooks:
  - name: orders
    kind: hmac
    secrets: [s]
    header: X-Signature
    schema:`+schema+`
    rules:
      - event: order.item_added
        workflow: collect
`), 0o600))
	}
	write(`
      type: object
      required: [order_id, item]
      properties:
        order_id: {type: string, minLength: 1}`)
	c, err := config.Load(path)
	require.NoError(t, err)
	sch, err := c.Webhooks[0].CompileSchema()
	require.NoError(t, err)
	require.NotNil(t, sch)
	require.Empty(t, sch.Validate([]byte(`{"order_id": "42", "item": {}}`)))
	v := sch.Validate([]byte(`{"order_id": "", "item": {}}`))
	require.NotEmpty(t, v)
	require.Equal(t, "/order_id", v[0].Field)
	require.NotEmpty(t, sch.Validate([]byte(`{"order_id": "42"}`)))

	// A schema that does not compile is a configuration error.
	write(` {type: 12}`)
	c, err = config.Load(path)
	require.NoError(t, err)
	require.ErrorContains(t, c.Webhooks[0].Validate(), "webhook orders: schema")
}
