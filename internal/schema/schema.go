package schema

import (
	"bytes"
	"errors"
	"fmt"
	"sort"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// ErrInvalidSchema is returned (wrapped) for a schema that does not compile.
var ErrInvalidSchema = errors.New("invalid JSON Schema")

// Schema is a compiled input schema.
type Schema struct {
	sch *jsonschema.Schema
	raw []byte
}

// Violation is one way an input fails its schema.
type Violation struct {
	// Field is the JSON Pointer of the offending value ("" is the whole
	// input).
	Field   string `json:"field"`
	Message string `json:"message"`
}

// Compile compiles a schema document; name identifies it in errors.
func Compile(name string, raw []byte) (*Schema, error) {
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidSchema, name, err)
	}
	c := jsonschema.NewCompiler()
	url := "harvest:///schemas/" + name + ".json"
	if err := c.AddResource(url, doc); err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidSchema, name, err)
	}
	sch, err := c.Compile(url)
	if err != nil {
		return nil, fmt.Errorf("%w %s: %v", ErrInvalidSchema, name, err)
	}
	return &Schema{sch: sch, raw: append([]byte(nil), raw...)}, nil
}

// Raw is the schema document as registered.
func (s *Schema) Raw() []byte { return s.raw }

// Validate checks a JSON input (absent means null) and returns its
// violations, sorted by field; none means valid.
func (s *Schema) Validate(input []byte) []Violation {
	if len(bytes.TrimSpace(input)) == 0 {
		input = []byte("null")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(input))
	if err != nil {
		return []Violation{{Field: "", Message: fmt.Sprintf("input is not JSON: %v", err)}}
	}
	err = s.sch.Validate(v)
	if err == nil {
		return nil
	}
	var ve *jsonschema.ValidationError
	if !errors.As(err, &ve) {
		return []Violation{{Field: "", Message: err.Error()}}
	}
	var out []Violation
	seen := map[Violation]bool{}
	for _, u := range ve.BasicOutput().Errors {
		if u.Error == nil {
			continue
		}
		v := Violation{Field: u.InstanceLocation, Message: u.Error.String()}
		if !seen[v] {
			seen[v] = true
			out = append(out, v)
		}
	}
	if len(out) == 0 {
		out = []Violation{{Field: "", Message: ve.Error()}}
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Field < out[j].Field })
	return out
}
