package openapi

import (
	_ "embed"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"time"
)

// JSON is the committed OpenAPI document, internal/openapi/openapi.json,
// which ingest serves at GET /openapi.json. Its test fails when Build no
// longer gives the same document (go test ./internal/openapi -update
// writes it again).
//
//go:embed openapi.json
var JSON []byte

// Version is the API version the document states.
const Version = "1.0.0"

// Build makes the OpenAPI 3.1 document of routes, its schemas reflected
// from the client package's wire types.
func Build(routes []Route) ([]byte, error) {
	r := &reflector{schemas: map[string]any{}}
	paths := map[string]map[string]any{}
	for _, rt := range routes {
		op, err := r.operation(rt)
		if err != nil {
			return nil, fmt.Errorf("openapi: %s %s: %w", rt.Method, rt.Path, err)
		}
		if paths[rt.Path] == nil {
			paths[rt.Path] = map[string]any{}
		}
		paths[rt.Path][strings.ToLower(rt.Method)] = op
	}
	doc := map[string]any{
		"openapi":           "3.1.0",
		"jsonSchemaDialect": "https://json-schema.org/draft/2020-12/schema",
		"info": map[string]any{
			"title":   "Harvest API",
			"version": Version,
			"description": "Harvest's HTTP API: starts and signals that each start or signal exactly one workflow execution, " +
				"reads of executions, their history and commands, live workers and task queues, admission gates, retention, webhooks " +
				"and the ArcFlow-compatible runs. " +
				"Every error is an ErrorResponse whose `error` is a machine-readable code. " +
				"When the API has tokens, each operation's security names the scope its token needs (`admin` holds every scope). " +
				"Any operation may answer 421 host_not_allowed to a Host the API does not answer (while it needs no token: any but " +
				"a loopback name or address, or one allowed_hosts lists), and a POST that a browser sent from another site with a " +
				"body that is not application/json is answered 403 cross_site_request.",
		},
		"servers": []any{map[string]any{"url": "http://127.0.0.1:8080", "description": "harvest dev"}},
		"paths":   paths,
		"components": map[string]any{
			"schemas": r.schemas,
			"securitySchemes": map[string]any{
				"bearer": map[string]any{"type": "http", "scheme": "bearer",
					"description": "An API token from auth.tokens; its scopes (start, signal, read, cancel, metrics, admin) decide what it may call."},
			},
		},
	}
	out, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	return append(out, '\n'), nil
}

func (r *reflector) operation(rt Route) (map[string]any, error) {
	op := map[string]any{"summary": rt.Summary, "operationId": rt.ID}
	if rt.Description != "" {
		op["description"] = rt.Description
	}
	if rt.Tag != "" {
		op["tags"] = []string{rt.Tag}
	}
	if rt.Deprecated {
		op["deprecated"] = true
	}
	if rt.Scope != "" {
		op["security"] = []any{map[string]any{"bearer": []string{rt.Scope}}}
	} else {
		op["security"] = []any{}
	}
	var params []any
	for _, name := range pathParams(rt.Path) {
		params = append(params, map[string]any{"name": name, "in": "path", "required": true, "schema": map[string]any{"type": "string"}})
	}
	for _, p := range rt.Query {
		params = append(params, map[string]any{"name": p.Name, "in": "query", "description": p.Description, "schema": schemaOfKind(p.Type)})
	}
	for _, p := range rt.Headers {
		params = append(params, map[string]any{"name": p.Name, "in": "header", "description": p.Description, "schema": map[string]any{"type": "string"}})
	}
	if len(params) > 0 {
		op["parameters"] = params
	}
	if rt.Body != nil {
		s, err := r.schemaOf(reflect.TypeOf(rt.Body))
		if err != nil {
			return nil, err
		}
		op["requestBody"] = map[string]any{"required": rt.BodyRequired, "content": map[string]any{"application/json": map[string]any{"schema": s}}}
	}
	responses := map[string]any{}
	for _, status := range slices.Sorted(maps.Keys(rt.Responses)) {
		ans := rt.Responses[status]
		resp := map[string]any{"description": ans.Description}
		if resp["description"] == "" {
			resp["description"] = http.StatusText(status)
		}
		switch body := ans.Body.(type) {
		case nil:
		case text:
			kind := "string"
			if body == "application/json" {
				kind = "object" // a document of its own, such as this one
			}
			resp["content"] = map[string]any{string(body): map[string]any{"schema": map[string]any{"type": kind}}}
		default:
			s, err := r.schemaOf(reflect.TypeOf(body))
			if err != nil {
				return nil, err
			}
			resp["content"] = map[string]any{"application/json": map[string]any{"schema": s}}
		}
		responses[strconv.Itoa(status)] = resp
	}
	op["responses"] = responses
	return op, nil
}

// pathParams are the {names} in a path, in order.
func pathParams(path string) []string {
	var out []string
	for rest := path; ; {
		i := strings.IndexByte(rest, '{')
		if i < 0 {
			return out
		}
		j := strings.IndexByte(rest[i:], '}')
		out = append(out, rest[i+1:i+j])
		rest = rest[i+j:]
	}
}

func schemaOfKind(kind string) map[string]any {
	switch kind {
	case "integer":
		return map[string]any{"type": "integer"}
	case "date-time":
		return map[string]any{"type": "string", "format": "date-time"}
	}
	return map[string]any{"type": "string"}
}

// reflector turns Go wire types into JSON Schemas (2020-12, as OpenAPI
// 3.1 uses them): structs become components, named by their Go names.
type reflector struct {
	schemas map[string]any
}

var (
	rawType  = reflect.TypeFor[json.RawMessage]()
	timeType = reflect.TypeFor[time.Time]()
	anyType  = reflect.TypeFor[any]()
)

// ref is a $ref to t's component, which it makes first if need be.
func (r *reflector) ref(t reflect.Type) (map[string]any, error) {
	name := t.Name()
	ref := map[string]any{"$ref": "#/components/schemas/" + name}
	if _, ok := r.schemas[name]; ok {
		return ref, nil
	}
	if s, ok := special[name]; ok {
		r.schemas[name] = s
		return ref, nil
	}
	r.schemas[name] = nil // taken: a type that refers to itself ends here
	props := map[string]any{}
	var required []string
	// An embedded struct without a name of its own is flat, as
	// encoding/json sends it: its fields are among t's.
	for _, f := range reflect.VisibleFields(t) {
		if f.Anonymous && f.Type.Kind() == reflect.Struct && f.Tag.Get("json") == "" {
			continue
		}
		if !f.IsExported() {
			continue
		}
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		jsonName, opts, _ := strings.Cut(tag, ",")
		if jsonName == "" {
			jsonName = f.Name
		}
		optional := strings.Contains(opts, "omitempty") || strings.Contains(opts, "omitzero")
		s, err := r.schemaOf(f.Type)
		if err != nil {
			return nil, fmt.Errorf("%s.%s: %w", name, f.Name, err)
		}
		if f.Type.Kind() == reflect.Pointer && !optional {
			// A nil pointer is sent as null.
			s = map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
		}
		props[jsonName] = s
		if !optional {
			required = append(required, jsonName)
		}
	}
	s := map[string]any{"type": "object", "properties": props, "additionalProperties": false}
	if len(required) > 0 {
		slices.Sort(required)
		s["required"] = required
	}
	r.schemas[name] = s
	return ref, nil
}

// special are the wire types whose JSON is not their fields'.
var special = map[string]any{
	// Event is flat: seq, type and at beside the event's own attributes.
	"Event": map[string]any{
		"type": "object",
		"properties": map[string]any{
			"seq":  map[string]any{"type": "integer"},
			"type": map[string]any{"type": "string"},
			"at":   map[string]any{"type": "string", "format": "date-time"},
		},
		"required":             []string{"at", "seq", "type"},
		"additionalProperties": true,
	},
}

// schemaOf is the schema of a value of type t.
func (r *reflector) schemaOf(t reflect.Type) (map[string]any, error) {
	switch {
	case t == rawType || t == anyType:
		return map[string]any{}, nil // any JSON value
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}, nil
	}
	switch t.Kind() {
	case reflect.Pointer:
		return r.schemaOf(t.Elem())
	case reflect.String:
		return map[string]any{"type": "string"}, nil
	case reflect.Bool:
		return map[string]any{"type": "boolean"}, nil
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer"}, nil
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}, nil
	case reflect.Slice:
		items, err := r.schemaOf(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "array", "items": items}, nil
	case reflect.Map:
		if t.Key().Kind() != reflect.String {
			return nil, fmt.Errorf("map key %s is not a string", t.Key())
		}
		values, err := r.schemaOf(t.Elem())
		if err != nil {
			return nil, err
		}
		return map[string]any{"type": "object", "additionalProperties": values}, nil
	case reflect.Struct:
		return r.ref(t)
	}
	return nil, fmt.Errorf("no schema for %s", t)
}
