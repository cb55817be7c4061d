package store

import "slices"

// Child workflows (docs/children.md). A child's execution names its
// parent (Execution.Parent); the parent keeps its children as they stand
// (Execution.Children): what its code started, the execution each start
// became, and how each closed, as the reports of the children's shards
// told it. A run that continues as new passes the children still open on
// to the next, so that its parent-close policy applies when the chain
// closes.

// ChildState is one child of an execution, as the parent knows it.
type ChildState struct {
	// StartedBy is the run that started it, whose ChildID it is: a chain
	// keeps the children of its runs.
	StartedBy    string `json:"started_by"`
	ChildID      int    `json:"child_id"`
	WorkflowName string `json:"workflow_name"`
	WorkflowID   string `json:"workflow_id"`
	// ExecutionID is the child's execution once its start was applied.
	ExecutionID string `json:"execution_id,omitempty"`
	// Status is ChildInitiated until the child's start is reported, then
	// ChildStartFailed, Running, or how the child's chain closed.
	Status      string `json:"status"`
	ClosePolicy string `json:"close_policy,omitempty"`
	// CancelRequested says the parent asked the child to cancel
	// (request_cancel_child, or its close's request_cancel policy).
	CancelRequested bool `json:"cancel_requested,omitempty"`
	// Settled says the parent's close policy was applied to the child (or
	// it had closed by then): nothing more is sent to it.
	Settled bool `json:"settled,omitempty"`
}

// Statuses of a ChildState besides the executions' own.
const (
	ChildInitiated   = "Initiated"
	ChildStartFailed = "StartFailed"
)

// Open says whether the child may still run: not refused, not closed.
func (c ChildState) Open() bool {
	return c.Status == ChildInitiated || c.Status == "Running"
}

// RunChildren are an execution's children, by child id, kept on its row
// (executions.children). A value is never changed once on an Execution:
// a change makes a new one (Execution copies share it).
type RunChildren struct {
	Children []ChildState `json:"children"`
}

// Get returns the child childID of the run startedBy, if c has it.
func (c *RunChildren) Get(startedBy string, childID int) (ChildState, bool) {
	if c == nil {
		return ChildState{}, false
	}
	for _, ch := range c.Children {
		if ch.StartedBy == startedBy && ch.ChildID == childID {
			return ch, true
		}
	}
	return ChildState{}, false
}

// With is c with ch in place of the child of its id (or added).
func (c *RunChildren) With(ch ChildState) *RunChildren {
	out := &RunChildren{}
	if c != nil {
		out.Children = slices.Clone(c.Children)
	}
	for i := range out.Children {
		if out.Children[i].StartedBy == ch.StartedBy && out.Children[i].ChildID == ch.ChildID {
			out.Children[i] = ch
			return out
		}
	}
	out.Children = append(out.Children, ch)
	return out
}

// OpenOnly are c's children that may still run, nil for none.
func (c *RunChildren) OpenOnly() *RunChildren {
	if c == nil {
		return nil
	}
	var out []ChildState
	for _, ch := range c.Children {
		if ch.Open() && !ch.Settled {
			out = append(out, ch)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return &RunChildren{Children: out}
}
