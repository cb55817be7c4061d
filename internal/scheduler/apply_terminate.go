package scheduler

import (
	"fmt"
	"net/http"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/wire"
)

// terminateCommand closes a running execution as Terminated, as a start
// with reuse_policy terminate_if_running does its prior run, and tells
// workers, so they cancel the contexts of its running activities. Its
// pending activities and timers are abandoned: their results and firings
// find the execution closed.
func (b *batch) terminateCommand(c seqCommand) {
	tc := c.cmd.Terminate
	out := wire.Outcome{CommandID: c.cmd.CommandID, StreamSeq: c.seq, Kind: wire.KindTerminate, ExecutionID: tc.ExecutionID, AppliedAt: b.now}
	e := b.execs[tc.ExecutionID]
	if e == nil {
		b.refuse(out, http.StatusNotFound, client.CodeExecutionNotFound, fmt.Sprintf("no execution %s", tc.ExecutionID))
		return
	}
	if e.Status == wire.StatusRunning {
		reason := tc.Reason
		if reason == "" {
			reason = "terminated"
		}
		b.terminate(e, reason)
	}
	// Terminating a closed execution changes nothing: the answer says how
	// it ended.
	b.outcome(out, e, false, false)
}
