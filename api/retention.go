package api

import "time"

// RetentionResponse answers GET /api/harvest/retention and POST
// /api/harvest/retention/prune: the closed executions past their
// retention at AsOf that the schedulers have not pruned yet, by workflow,
// and the closed executions still without a prune time (closed before
// retention existed; the schedulers give them theirs, their close plus
// their retention, then prune them once it has passed). The totals are
// those of Workflows; a token limited to some workflows sees only theirs.
type RetentionResponse struct {
	// AsOf is the time "past retention" is told at: the server's now, or
	// the as_of asked for.
	AsOf time.Time `json:"as_of"`
	// PastRetention counts the executions whose prune time is before
	// AsOf, not pruned yet.
	PastRetention int64 `json:"past_retention"`
	// ClosedWithoutPruneAfter counts the closed executions without a
	// prune time yet.
	ClosedWithoutPruneAfter int64 `json:"closed_without_prune_after"`
	// Workflows are the workflows with either, by name.
	Workflows []WorkflowRetention `json:"workflows"`
}

// WorkflowRetention is one workflow's line of a RetentionResponse.
type WorkflowRetention struct {
	WorkflowName            string `json:"workflow_name"`
	PastRetention           int64  `json:"past_retention"`
	ClosedWithoutPruneAfter int64  `json:"closed_without_prune_after"`
	// OldestPruneAfter is the earliest prune time of its executions past
	// retention; absent when it has none.
	OldestPruneAfter *time.Time `json:"oldest_prune_after,omitempty"`
}

// Pending says whether anything is left for the pruners: executions past
// retention, or closed ones without a prune time.
func (r *RetentionResponse) Pending() bool {
	return r.PastRetention > 0 || r.ClosedWithoutPruneAfter > 0
}
