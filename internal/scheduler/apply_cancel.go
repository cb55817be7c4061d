package scheduler

import (
	"encoding/json"
	"fmt"
	"net/http"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/wire"
)

// cancel closes a running execution as Cancelled, and tells workers, so
// they cancel the contexts of its running activities.
func (b *batch) cancel(c seqCommand) {
	cc := c.cmd.Cancel
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindCancel, ExecutionID: cc.ExecutionID, AppliedAt: b.now}
	e := b.execs[cc.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, client.CodeExecutionNotFound, fmt.Sprintf("no execution %s", cc.ExecutionID))
		return
	}
	if e.Status == wire.StatusRunning {
		reason := cc.Reason
		if reason == "" {
			reason = "cancelled"
		}
		e.Error, _ = json.Marshal(wire.Failure{Type: "Cancelled", Message: reason})
		b.close(e, wire.StatusCancelled, wire.EventWorkflowCancelled, wire.WorkflowClosedAttrs{Reason: reason})
		e.WFTOutstanding, e.WFTDirty = false, false
		b.stopActivities(e, "cancel:", reason)
	}
	// Cancelling a closed execution changes nothing: the answer says how it
	// ended.
	b.outcome(out, e, false, false)
}
