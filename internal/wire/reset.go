package wire

import "fmt"

// KindReset starts a new run of an execution's workflow_id from a point
// of its history (docs/reset.md): the events before the point are kept,
// the rest is run again by the current code.
const KindReset = "reset"

// ResetCommand asks to reset the execution ExecutionID to the workflow
// task whose WorkflowTaskCompleted is event PointSeq of its history.
// Ingest resolves the point a client names (an activity, the first or
// last task) to that seq; the scheduler checks it again against the
// history it holds. A batch's reset names Target instead (PointSeq 0),
// which the scheduler resolves against each execution's history.
type ResetCommand struct {
	ExecutionID string       `json:"execution_id"`
	PointSeq    int          `json:"point_seq,omitempty"`
	Target      *ResetTarget `json:"target,omitempty"`
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
	// By is the batch that reset the run, "" for a reset of its own.
	By string `json:"by,omitempty"`
}

// ResetTarget is a reset point as a client names it: a
// WorkflowTaskCompleted's seq, the task that scheduled an occurrence of
// an activity, or the first or last task. One of them is set.
type ResetTarget struct {
	Seq        int    `json:"seq,omitempty"`
	Activity   string `json:"activity,omitempty"`
	Occurrence string `json:"occurrence,omitempty"`
	FirstTask  bool   `json:"first_task,omitempty"`
	LastTask   bool   `json:"last_task,omitempty"`
}

// String says the target as the CLI writes it.
func (t ResetTarget) String() string {
	switch {
	case t.Seq > 0:
		return fmt.Sprintf("seq:%d", t.Seq)
	case t.Activity != "":
		return fmt.Sprintf("activity:%s (%s)", t.Activity, t.Occurrence)
	case t.FirstTask:
		return "first_task"
	}
	return "last_task"
}
