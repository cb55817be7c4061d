package wire

import (
	"encoding/json"
	"time"
)

// Search attributes (docs/search-attributes.md): indexed values an
// execution carries, declared per workflow with a type, set by its start
// and by its workflow code, which lists, counts and batches filter on.

// DecisionUpsertSearchAttributes sets search attributes of the execution
// (Decision.SearchAttributes); EventSearchAttributesUpserted records it.
const (
	DecisionUpsertSearchAttributes = "upsert_search_attributes"
	EventSearchAttributesUpserted  = "SearchAttributesUpserted"
)

// TaskFailedSearchAttributes is the Reason of a workflow task the
// scheduler refused because it set a search attribute its workflow does
// not declare, or a value of another type.
const TaskFailedSearchAttributes = "invalid_search_attribute"

// SearchAttributesAttrs are the attributes of a SearchAttributesUpserted
// event: the values set, by name, each a JSON value.
type SearchAttributesAttrs struct {
	SearchAttributes map[string]json.RawMessage `json:"search_attributes"`
}

// Search attribute types, as a workflow declares them.
const (
	SearchKeyword = "keyword"
	SearchInt     = "int"
	SearchDouble  = "double"
	SearchBool    = "bool"
	SearchTime    = "time"
)

// SearchValue is a search attribute's value as it is indexed: a keyword
// or bool in Keyword, an int or double in Num, a time in Time.
type SearchValue struct {
	Keyword *string    `json:"keyword,omitempty"`
	Num     *float64   `json:"num,omitempty"`
	Time    *time.Time `json:"time,omitempty"`
}

// SearchCondition is one filter on a search attribute: Name Op Value,
// Op one of eq, gt, gte, lt, lte (searchattr).
type SearchCondition struct {
	Name  string      `json:"name"`
	Op    string      `json:"op"`
	Value SearchValue `json:"value"`
}
