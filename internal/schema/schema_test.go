package schema_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/schema"
)

const charge = `{
	"type": "object",
	"required": ["amount_cents", "customer_id"],
	"properties": {
		"amount_cents": {"type": "integer", "minimum": 1},
		"customer_id": {"type": "string", "minLength": 1},
		"lines": {"type": "array", "items": {"type": "object", "required": ["sku"]}}
	}
}`

func TestValidateReportsFieldPaths(t *testing.T) {
	t.Parallel()
	s, err := schema.Compile("charge", []byte(charge))
	require.NoError(t, err)
	require.Empty(t, s.Validate([]byte(`{"amount_cents": 5, "customer_id": "c"}`)))

	v := s.Validate([]byte(`{"amount_cents": 0, "customer_id": "", "lines": [{"sku": "a"}, {}]}`))
	fields := map[string]bool{}
	for _, x := range v {
		fields[x.Field] = true
		require.NotEmpty(t, x.Message)
	}
	require.True(t, fields["/amount_cents"], "%v", v)
	require.True(t, fields["/customer_id"], "%v", v)
	require.True(t, fields["/lines/1"], "%v", v)

	missing := s.Validate(nil)
	require.Len(t, missing, 1)
	require.Equal(t, "", missing[0].Field)
}

func TestCompileRejectsBadSchemas(t *testing.T) {
	t.Parallel()
	_, err := schema.Compile("x", []byte(`{"type": 12}`))
	require.ErrorIs(t, err, schema.ErrInvalidSchema)
	_, err = schema.Compile("x", []byte(`{not json`))
	require.ErrorIs(t, err, schema.ErrInvalidSchema)
}
