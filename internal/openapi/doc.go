// Package openapi describes Harvest's HTTP API in OpenAPI 3.1: Routes is
// the table of operations, Build makes the document from it (schemas
// reflected from package api's wire types, so the description and
// the server cannot drift), and JSON is the committed document ingest
// serves at GET /openapi.json.
//
// Tests hold it true: the committed file is what Build gives; every
// route ingest registers is in the table and every route of the table
// is registered (internal/ingest); and the answers a real stack gives,
// status and body, are the ones the document describes
// (internal/dev/devstack). `go test ./internal/openapi -update` writes the
// file again after a change.
package openapi
