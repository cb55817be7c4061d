package ingest

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/openapi"
)

// TestEveryRouteIsDescribed: the routes the server registers are exactly
// the operations of the API's OpenAPI document (the console's pages and
// the catch-all 404 aside).
func TestEveryRouteIsDescribed(t *testing.T) {
	e := newEdge(t)
	var served []string
	for _, p := range e.s.Routes() {
		if p == "/" || p == "/ui/" {
			continue
		}
		served = append(served, p)
	}
	v, err := openapi.NewValidator(nil)
	require.NoError(t, err)
	described := v.Operations()
	slices.Sort(served)
	slices.Sort(described)
	require.Equal(t, described, served, "a route added or removed? describe it in internal/openapi's Routes, then go test ./internal/openapi -update")
}
