package harvest

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// UpsertSearchAttributes sets search attributes of the execution
// (docs/search-attributes.md): indexed values that lists, counts and
// batch operations filter on (GET /api/harvest/executions?attr.NAME=…).
// Each must be declared by the workflow in the configuration
// (workflows.<name>.search_attributes) with its type: a string for a
// keyword, an integer for an int, a number for a double, a bool, a
// time.Time for a time. A value of any other Go type is refused here,
// and sets nothing; a name the workflow does not declare, or a value of
// another type than declared, fails the workflow task, which goes again
// once code or configuration that agree are deployed. A nil value
// removes the attribute: lists, counts and batches no longer find the
// execution by it, and describe no longer shows it. The call is
// recorded in the history (SearchAttributesUpserted), so a replay sets
// the same values; a later call replaces what an earlier one set of the
// same names.
func UpsertSearchAttributes(ctx *WorkflowContext, attrs map[string]any) error {
	if len(attrs) == 0 {
		return nil
	}
	raw, err := encodeSearchAttributes(attrs, true)
	if err != nil {
		return fmt.Errorf("harvest: UpsertSearchAttributes: %w", err)
	}
	ctx.x.decide(wire.Decision{Type: wire.DecisionUpsertSearchAttributes, SearchAttributes: raw})
	return nil
}

// encodeSearchAttributes encodes search attribute values as JSON: a
// string, a bool, a number or a time.Time each, or, when removable, nil
// (JSON null: the attribute is removed); nil for none.
func encodeSearchAttributes(attrs map[string]any, removable bool) (map[string]json.RawMessage, error) {
	if len(attrs) == 0 {
		return nil, nil
	}
	raw := make(map[string]json.RawMessage, len(attrs))
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		v := attrs[name]
		switch t := v.(type) {
		case nil:
			if !removable {
				return nil, fmt.Errorf("%s: nil is no search attribute value here: want a string, a bool, a number or a time.Time", name)
			}
		case string, bool, int, int8, int16, int32, int64, uint, uint8, uint16, uint32, uint64, float32, float64:
		case time.Time:
			v = t.UTC().Format(time.RFC3339Nano)
		default:
			return nil, fmt.Errorf("%s: a %T is no search attribute value: want a string, a bool, a number or a time.Time", name, v)
		}
		b, err := json.Marshal(v)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		if err := storable.CheckJSON(b); err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		raw[name] = b
	}
	return raw, nil
}
