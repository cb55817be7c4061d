package openapi_test

import (
	"bytes"
	"flag"
	"os"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/openapi"
)

var update = flag.Bool("update", false, "write openapi.json from the route table")

// TestTheCommittedDocumentIsTheBuiltOne: openapi.json is what Build makes
// of Routes (-update writes it).
func TestTheCommittedDocumentIsTheBuiltOne(t *testing.T) {
	built, err := openapi.Build(openapi.Routes)
	require.NoError(t, err)
	if *update {
		require.NoError(t, os.WriteFile("openapi.json", built, 0o644))
		return
	}
	committed, err := os.ReadFile("openapi.json")
	require.NoError(t, err)
	require.True(t, bytes.Equal(built, committed), "openapi.json is out of date: go test ./internal/openapi -update")
	require.Equal(t, committed, openapi.JSON, "the embedded document is the file")
}

// TestEverySchemaCompiles: each component and each body's schema is a
// valid JSON Schema 2020-12, so that validators and generators take them.
func TestEverySchemaCompiles(t *testing.T) {
	v, err := openapi.NewValidator(nil)
	require.NoError(t, err)
	require.NotEmpty(t, v.Components())
	for _, name := range v.Components() {
		_, err := v.Schema("/components/schemas/" + name)
		require.NoError(t, err, name)
	}
	require.Len(t, v.Operations(), len(openapi.Routes))
}
