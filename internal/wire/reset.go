package wire

// KindReset starts a new run of an execution's workflow_id from a point
// of its history (docs/reset.md): the events before the point are kept,
// the rest is run again by the current code.
const KindReset = "reset"

// ResetCommand asks to reset the execution ExecutionID to the workflow
// task whose WorkflowTaskCompleted is event PointSeq of its history.
// Ingest resolves the point a client names (an activity, the first or
// last task) to that seq; the scheduler checks it again against the
// history it holds.
type ResetCommand struct {
	ExecutionID string `json:"execution_id"`
	PointSeq    int    `json:"point_seq"`
	// ReapplySignals says whether the signals the run received after
	// the point are received again by the new run, with their keys.
	ReapplySignals bool   `json:"reapply_signals"`
	Reason         string `json:"reason,omitempty"`
}

// ResetKey is the idempotency key an activity of the run a reset left
// had, at its position (its activity id): the new run's activity of the
// same id keeps it when it has the same name too (decide.Keys).
type ResetKey struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ResetInfo is how a run is linked to resets: From is the run it was
// reset from, at FromSeq of that run's history, with the activity keys
// it inherits (ResetKey, by activity id); To is the run that replaced it,
// reset to ToSeq of its history, for Reason.
type ResetInfo struct {
	From    string           `json:"from,omitempty"`
	FromSeq int              `json:"from_seq,omitempty"`
	Keys    map[int]ResetKey `json:"keys,omitempty"`
	To      string           `json:"to,omitempty"`
	ToSeq   int              `json:"to_seq,omitempty"`
	Reason  string           `json:"reason,omitempty"`
}
