package scheduler

import (
	"reflect"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/store"
)

// memoryWrites places every field of store.Writes: true for what
// Memory.write makes to the in-memory shard as store.Write makes it to
// PostgreSQL, false (with the reason) for what the in-memory shard has no
// use for. A field added to store.Writes fails
// TestMemoryPlacesEveryWrite until it is placed here, and so, when it
// holds rows a workflow depends on, until the test kit makes it too.
var memoryWrites = map[string]bool{
	"NewExecutions":     true,
	"Events":            true,
	"NewActivities":     true,
	"RepointClaims":     true,
	"DeleteClaims":      true,
	"NewTimers":         true,
	"FiredTimers":       true,
	"ActivityDone":      true,
	"ExecutionsClosed":  true,
	"CancelledTimers":   true,
	"WorkflowTasksDone": true,
	"SignalClaims":      true,
	"NewUpdates":        true,
	"UpdateChanges":     true,
	"Outcomes":          true,
	"States":            true,
	"Outbox":            true,
	"Schedules":         true,
	// The batch changes the shard's own rows in place.
	"UpdatedExecutions": false,
	"UpdatedActivities": false,
	// One shard, which applies what it is given once.
	"Shard":         false,
	"AppliedSeq":    false,
	"Preconditions": false,
	// Nothing is published after a commit: Apply returns what it sends.
	"PublishedOutbox": false,
	// The kit delivers no callbacks, counts no duplicates (it has no
	// broker to catch them), refuses starts under a policy, and builds
	// its commands itself, so none is set aside as dead.
	"Callbacks":  false,
	"Duplicates": false,
	"Policies":   false,
	// Its executions run under no concurrency policy (a start under a
	// policy is refused), so none gives a slot back.
	"Concurrency":  false,
	"DeadCommands": false,
	// Batch operations are an operator's, through the HTTP API, which the
	// kit has none of.
	"Batches": false,
	// Search attributes are kept for describe (Memory.SearchAttributes),
	// a continued run's copied from the run it continues; the kit has no
	// lists or counts to filter by them.
	"SearchAttributes":      true,
	"SearchAttributeCopies": true,
	// Counted by a deployment's scheduler metrics; the executions' rows,
	// which hold the history's size and warning, are the shard's own.
	"HistoryCrossings": false,
	"StickyMoved":      false,
}

func TestMemoryPlacesEveryWrite(t *testing.T) {
	t.Parallel()
	typ := reflect.TypeFor[store.Writes]()
	fields := make([]string, 0, typ.NumField())
	for f := range typ.Fields() {
		fields = append(fields, f.Name)
	}
	require.ElementsMatch(t, fields, mapKeys(memoryWrites),
		"every field of store.Writes is made by Memory.write or left out of it for a reason, in memoryWrites")
}
