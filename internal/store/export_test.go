package store

// SetBasedUpdateRows exposes setBasedUpdateRows to the tests.
const SetBasedUpdateRows = setBasedUpdateRows

// PruneSettings and PruneCandidates expose the pruner's query and the
// settings it runs under to the tests.
const (
	PruneSettings   = pruneSettings
	PruneCandidates = pruneCandidates
)
