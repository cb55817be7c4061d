// Package schema compiles the JSON Schemas that workers register for their
// workflows' input, and validates inputs against them, reporting each
// violation with the JSON Pointer of the field at fault. It wraps
// santhosh-tekuri/jsonschema (drafts 4 to 2020-12).
//
// A compiled *Schema is safe for concurrent use.
//
// It is a leaf: no I/O; workers publish the schemas, ingest validates
// with them.
package schema
