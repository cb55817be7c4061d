package api

// Execution statuses: Execution.Status, and the status of every answer
// that names an execution. Every status but Running and Pending is
// terminal.
const (
	StatusRunning = "Running"
	// StatusPending: the execution was started under a concurrency start
	// policy whose limit its key has reached; it begins (Running) as a
	// running one closes (Execution.WaitingFor says so).
	StatusPending    = "Pending"
	StatusCompleted  = "Completed"
	StatusFailed     = "Failed"
	StatusCancelled  = "Cancelled"
	StatusTerminated = "Terminated"
	StatusTimedOut   = "TimedOut"
	// StatusContinuedAsNew closes a run that continued as a new one
	// (harvest.ContinueAsNew): same workflow_id, a new execution_id,
	// linked both ways (continued_as, continued_from).
	StatusContinuedAsNew = "ContinuedAsNew"
)

// IsTerminal reports whether status is a closed execution's status.
func IsTerminal(status string) bool {
	switch status {
	case StatusCompleted, StatusFailed, StatusCancelled, StatusTerminated, StatusTimedOut, StatusContinuedAsNew:
		return true
	}
	return false
}

// Reuse policies for StartRequest.ReusePolicy and
// SignalWithStartRequest.ReusePolicy: what a start does when its
// workflow_id already has an execution. Empty means ReuseAllowDuplicate.
const (
	// ReuseAllowDuplicate returns the existing execution (the default).
	ReuseAllowDuplicate = "allow_duplicate"
	// ReuseAllowDuplicateFailedOnly starts anew only if the prior run
	// Failed or was Cancelled, else returns it.
	ReuseAllowDuplicateFailedOnly = "allow_duplicate_failed_only"
	// ReuseRejectDuplicate refuses the start (409 workflow_id_conflict).
	ReuseRejectDuplicate = "reject_duplicate"
	// ReuseTerminateIfRunning terminates a running prior run and starts
	// anew.
	ReuseTerminateIfRunning = "terminate_if_running"
)
