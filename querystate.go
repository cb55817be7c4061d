package harvest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// MaxQueryStateBytes bounds a query state's value, encoded as JSON: 256
// KiB.
const MaxQueryStateBytes = wire.MaxStateBytes

// ErrInvalidQueryState is returned (wrapped) by SetQueryState for a name
// that is no name, or a value that does not encode as JSON, holds what
// PostgreSQL cannot store (U+0000) or is larger than
// MaxQueryStateBytes. The state keeps its previous value.
var ErrInvalidQueryState = errors.New("invalid query state")

// SetQueryState records value (encoded as JSON) as the latest value of
// the execution's state name, which anyone can read while the execution
// runs, with no worker running, and after it closed:
// GET /api/harvest/executions/{id}/state/{name}, `harvest workflow
// state`, client.State, the console's execution page
// (docs/long-workflows.md#reading-a-running-workflow).
//
//	harvest.SetQueryState(ctx, "progress", Progress{Done: done, Of: total})
//
// A state is not history: setting one adds no event, and a replay neither
// matches nor records it, so adding, changing or removing a call never
// makes a replay diverge. What a workflow task set is stored when the
// task completes, its last value for each name, with the seq of the
// task's WorkflowTaskCompleted: a reader sees the state as of the last
// task the scheduler recorded. Names are as signal names are: 1 to 128
// letters, digits, '_' and '-'. A name that is not one, and a value that
// cannot be stored, return an error matching ErrInvalidQueryState. Each
// run of a chain continued as new has states of its own.
func SetQueryState(ctx *WorkflowContext, name string, value any) error {
	if err := dedup.ValidateName(name); err != nil {
		return fmt.Errorf("harvest: SetQueryState: %w: %w", ErrInvalidQueryState, err)
	}
	raw, err := json.Marshal(value)
	if err != nil {
		return fmt.Errorf("harvest: SetQueryState %q: %w: encode the value: %w", name, ErrInvalidQueryState, err)
	}
	if len(raw) > MaxQueryStateBytes {
		return fmt.Errorf("harvest: SetQueryState %q: %w: the value is %d bytes as JSON, more than %d", name, ErrInvalidQueryState, len(raw), MaxQueryStateBytes)
	}
	if err := storable.CheckJSON(raw); err != nil {
		// Refused here, where the code can be fixed, rather than by the
		// scheduler, which would drop it.
		return fmt.Errorf("harvest: SetQueryState %q: %w: %w", name, ErrInvalidQueryState, err)
	}
	x := ctx.x
	if x.updates.validating {
		// A validator only reads: the update it refuses leaves no trace.
		return fmt.Errorf("harvest: SetQueryState %q: %w: called in an update's validator, which only reads", name, ErrInvalidQueryState)
	}
	if x.states == nil {
		x.states = map[string]json.RawMessage{}
	}
	x.states[name] = raw
	return nil
}

// waitingChange returns what the code's goroutines wait for when it
// differs from what this execution last returned, nil when it does not,
// and takes it as returned. A fresh execution returns it.
func (x *execution) waitingChange() *api.Waiting {
	waits := x.d.waits()
	raw, err := json.Marshal(waits)
	if err != nil || bytes.Equal(raw, x.sentWaiting) {
		return nil
	}
	x.sentWaiting = raw
	return &api.Waiting{Waits: waits}
}

// stateChanges returns, by name, the states whose values differ from what
// this execution last returned, and takes them as returned: a workflow
// task's result carries them. A fresh execution (a replay after a cache
// miss) returns every state its code set.
func (x *execution) stateChanges() []wire.StateValue {
	var out []wire.StateValue
	for name, raw := range x.states {
		if sent, ok := x.sentStates[name]; ok && bytes.Equal(sent, raw) {
			continue
		}
		out = append(out, wire.StateValue{Name: name, Value: raw})
	}
	if len(out) == 0 {
		return nil
	}
	if x.sentStates == nil {
		x.sentStates = make(map[string]json.RawMessage, len(x.states))
	}
	for _, s := range out {
		x.sentStates[s.Name] = s.Value
	}
	slices.SortFunc(out, func(a, b wire.StateValue) int { return strings.Compare(a.Name, b.Name) })
	return out
}
