package scheduler

import (
	"encoding/json"

	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Search attributes (docs/search-attributes.md): a start's and those its
// workflow code upserts are indexed, one row per attribute
// (store.SearchAttributeRow); a run that continues another keeps the
// other's, a run a reset made those of the events it kept.

// setSearchAttributes indexes attrs as e's search attributes. What its
// workflow does not declare, or a value not of its type, is left out:
// ingest checked a start's, and a task that sets such fails before its
// decisions apply (badSearchAttributes).
func (b *batch) setSearchAttributes(e *store.Execution, attrs map[string]json.RawMessage) {
	types := b.searchAttrs[e.WorkflowName]
	for name, raw := range attrs {
		typ, ok := types[name]
		if !ok {
			continue
		}
		if searchattr.Removed(raw) {
			// A row without a value: no filter matches it, and reads
			// leave it out, as if there were none (store.SearchAttributes).
			b.writes.SearchAttributes = append(b.writes.SearchAttributes, store.SearchAttributeRow{ExecutionID: e.ExecutionID, Name: name})
			continue
		}
		v, err := searchattr.Store(typ, raw)
		if err != nil {
			continue
		}
		b.writes.SearchAttributes = append(b.writes.SearchAttributes, store.SearchAttributeRow{ExecutionID: e.ExecutionID, Name: name, Value: v})
	}
}

// badSearchAttributes says what is wrong with the search attributes r's
// decisions set on e, "" when nothing is.
func (b *batch) badSearchAttributes(e *store.Execution, r *wire.WorkflowTaskResult) string {
	for _, d := range r.Decisions {
		if d.Type != wire.DecisionUpsertSearchAttributes {
			continue
		}
		if err := b.searchAttrs.CheckUpsert(e.WorkflowName, d.SearchAttributes); err != nil {
			return err.Error()
		}
	}
	return ""
}
