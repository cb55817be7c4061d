package openapi

import (
	"bytes"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// docURL is where a Validator files the document.
const docURL = "https://harvest.invalid/openapi.json"

// Validator checks answers against the document: that the route
// describes the status, and that the body matches its schema.
type Validator struct {
	doc   map[string]any
	mu    sync.Mutex
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
}

// NewValidator reads a document (JSON, or nil for the committed one).
func NewValidator(raw []byte) (*Validator, error) {
	if raw == nil {
		raw = JSON
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("openapi: read the document: %w", err)
	}
	c := jsonschema.NewCompiler()
	c.DefaultDraft(jsonschema.Draft2020)
	if err := c.AddResource(docURL, doc); err != nil {
		return nil, fmt.Errorf("openapi: %w", err)
	}
	m, ok := doc.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("openapi: the document is not an object")
	}
	return &Validator{doc: m, c: c, cache: map[string]*jsonschema.Schema{}}, nil
}

// Schema compiles the schema at a JSON pointer of the document.
func (v *Validator) Schema(pointer string) (*jsonschema.Schema, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if s, ok := v.cache[pointer]; ok {
		return s, nil
	}
	s, err := v.c.Compile(docURL + "#" + pointer)
	if err != nil {
		return nil, fmt.Errorf("openapi: compile %s: %w", pointer, err)
	}
	v.cache[pointer] = s
	return s, nil
}

// Components are the names of the document's component schemas.
func (v *Validator) Components() []string {
	comps, _ := v.doc["components"].(map[string]any)
	schemas, _ := comps["schemas"].(map[string]any)
	out := make([]string, 0, len(schemas))
	for name := range schemas {
		out = append(out, name)
	}
	return out
}

// Operations are the document's operations as "METHOD /path".
func (v *Validator) Operations() []string {
	paths, _ := v.doc["paths"].(map[string]any)
	var out []string
	for path, item := range paths {
		ops, _ := item.(map[string]any)
		for method := range ops {
			out = append(out, strings.ToUpper(method)+" "+path)
		}
	}
	return out
}

// Check says how an answer of method on path (the route's pattern, such
// as /api/harvest/executions/{execution_id}) departs from the document:
// an undescribed status, or a body its schema refuses. nil when it
// conforms.
func (v *Validator) Check(method, path string, status int, contentType string, body []byte) error {
	paths, _ := v.doc["paths"].(map[string]any)
	item, _ := paths[path].(map[string]any)
	op, _ := item[strings.ToLower(method)].(map[string]any)
	if op == nil {
		return fmt.Errorf("%s %s is not in the document", method, path)
	}
	responses, _ := op["responses"].(map[string]any)
	resp, _ := responses[strconv.Itoa(status)].(map[string]any)
	if resp == nil {
		return fmt.Errorf("%s %s: status %d is not described (body %s)", method, path, status, body)
	}
	content, _ := resp["content"].(map[string]any)
	if _, isJSON := content["application/json"]; !isJSON || !strings.HasPrefix(contentType, "application/json") {
		if len(content) > 0 && contentType == "" {
			return fmt.Errorf("%s %s %d: no Content-Type", method, path, status)
		}
		return nil
	}
	pointer := "/paths/" + escape(path) + "/" + strings.ToLower(method) + "/responses/" + strconv.Itoa(status) + "/content/application~1json/schema"
	s, err := v.Schema(pointer)
	if err != nil {
		return err
	}
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("%s %s %d: the body is not JSON: %w", method, path, status, err)
	}
	if err := s.Validate(inst); err != nil {
		return fmt.Errorf("%s %s %d: body %s: %w", method, path, status, body, err)
	}
	return nil
}

// escape is a JSON Pointer token.
func escape(s string) string {
	return strings.ReplaceAll(strings.ReplaceAll(s, "~", "~0"), "/", "~1")
}
