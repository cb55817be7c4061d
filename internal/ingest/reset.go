package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/decide"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// resetMembers are a reset body's string members, by the code their
// refusal gets.
var resetMembers = map[string]string{"reason": api.CodeInvalidReason}

// handleReset is POST /api/harvest/executions/{execution_id}/reset
// (docs/reset.md): it reads the execution's history, resolves the point
// the body names to a workflow task a reset can go to, and answers the
// plan (?dry_run=true) or publishes the reset and answers the new run.
func (s *Server) handleReset(w http.ResponseWriter, r *http.Request) {
	executionID, ok := pathExecutionID(w, r, "execution_id")
	if !ok || !s.readable(w) || !s.executionVisible(w, r, executionID) {
		return
	}
	dryRun := false
	if v := queryOf(r).Get("dry_run"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidDryRun, "dry_run", fmt.Sprintf("dry_run %q: want true or false", v))
			return
		}
		dryRun = b
	}
	body, rej := s.readBody(w, r)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	var req api.ResetRequest
	if len(body) == 0 {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidResetPoint, "to",
			`a reset's body names its point: {"to": {"seq": N}}, {"to": {"activity": "charge_card", "occurrence": "last_failed"}}, {"to": "first_task"} or {"to": "last_task"}`)
		return
	}
	unknown, rej := decodeObject(body, &req, "a reset's body")
	if rej == nil {
		rej = unknown
	}
	if rej == nil {
		rej = unstorableBody(body, resetMembers)
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	target, rej := resetTarget(req.To)
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	ctx, cancel := s.readContext(r.Context())
	defer cancel()
	e, err := store.GetExecution(ctx, s.poolOf(executionID), executionID)
	if err != nil {
		s.readError(w, executionID, err)
		return
	}
	events, err := store.GetHistory(ctx, s.poolOf(executionID), executionID)
	if err != nil {
		s.readError(w, executionID, err)
		return
	}
	point, err := decide.FindResetPoint(events, target)
	var plan decide.ResetPlan
	if err == nil {
		plan, err = decide.PlanReset(events, point)
	}
	if err != nil {
		var bad *decide.InvalidResetPoint
		if !errors.As(err, &bad) {
			bad = &decide.InvalidResetPoint{Reason: err.Error()}
		}
		writeJSON(w, http.StatusUnprocessableEntity, api.ErrorResponse{Error: api.CodeInvalidResetPoint, Field: "to",
			Message: fmt.Sprintf("execution %s cannot be reset to %s: %s", executionID, target, bad.Reason), NearestPoints: bad.Nearest})
		return
	}
	reapply := req.ReapplySignals == nil || *req.ReapplySignals
	if dryRun {
		writeJSON(w, http.StatusOK, planView(e, events, &plan, reapply))
		return
	}
	// Each request is a command of its own: a reset refused while its
	// key had no free slot may be asked again, and is applied then. A
	// retry of one that was applied is answered by the scheduler with
	// the run the first one made (the execution records its reset).
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindReset,
		Reset: &wire.ResetCommand{ExecutionID: executionID, PointSeq: point, ReapplySignals: reapply, Reason: req.Reason}}
	shard := s.cfg.Topology.Layout().ExecutionShard(executionID)
	out, duplicate, err := s.submit(r.Context(), shard, cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, "reset")
		writeAnswer(w, status, body)
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, api.AcceptedResponse{CommandID: cmd.CommandID, Status: "accepted"})
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
	default:
		// The same reset applied before (a broker duplicate, or one the
		// scheduler found applied) is answered with the run it made,
		// deduplicated.
		writeJSON(w, http.StatusCreated, api.ResetResponse{ExecutionID: out.ExecutionID, Status: out.Status, WorkflowID: out.WorkflowID,
			WorkflowName: out.WorkflowName, ResetFrom: executionID, PointSeq: point, Deduplicated: out.Deduplicated || duplicate})
	}
}

// resetTarget reads a reset's "to".
func resetTarget(raw json.RawMessage) (decide.ResetTarget, *rejection) {
	bad := func(msg string) (decide.ResetTarget, *rejection) {
		return decide.ResetTarget{}, reject(http.StatusBadRequest, api.CodeInvalidResetPoint, "to", msg)
	}
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || bytes.Equal(raw, []byte("null")) {
		return bad(`to is required: {"seq": N}, {"activity": "charge_card", "occurrence": "last_failed"}, "first_task" or "last_task"`)
	}
	var word string
	if json.Unmarshal(raw, &word) == nil {
		switch word {
		case "first_task":
			return decide.ResetTarget{FirstTask: true}, nil
		case "last_task":
			return decide.ResetTarget{LastTask: true}, nil
		}
		return bad(fmt.Sprintf(`to %q: want "first_task", "last_task", {"seq": N} or {"activity": NAME}`, word))
	}
	var obj api.ResetPoint
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&obj); err != nil {
		return bad(fmt.Sprintf(`to: want {"seq": N}, {"activity": NAME, "occurrence": "first"|"last"|"last_failed"}, "first_task" or "last_task" (%v)`, err))
	}
	switch {
	case obj.Seq != nil && obj.Activity != "":
		return bad("to names a seq or an activity, not both")
	case obj.Seq != nil:
		if *obj.Seq < 1 {
			return bad(fmt.Sprintf("to.seq %d: want the seq of a WorkflowTaskCompleted event, 1 or more", *obj.Seq))
		}
		if obj.Occurrence != "" {
			return bad("to.occurrence goes with to.activity")
		}
		return decide.ResetTarget{Seq: *obj.Seq}, nil
	case obj.Activity != "":
		if err := dedup.ValidateName(obj.Activity); err != nil {
			return bad(fmt.Sprintf("to.activity: %v", err))
		}
		occ := obj.Occurrence
		switch occ {
		case "":
			occ = decide.OccurrenceLast
		case decide.OccurrenceFirst, decide.OccurrenceLast, decide.OccurrenceLastFailed:
		default:
			return bad(fmt.Sprintf(`to.occurrence %q: want "first", "last" or "last_failed"`, occ))
		}
		return decide.ResetTarget{Activity: obj.Activity, Occurrence: occ}, nil
	}
	return bad(`to names a seq or an activity: {"seq": N} or {"activity": NAME}`)
}

// planView is plan as a dry run answers it.
func planView(e *store.Execution, events []wire.Event, plan *decide.ResetPlan, reapply bool) api.ResetPlan {
	v := api.ResetPlan{DryRun: true, ExecutionID: e.ExecutionID, PointSeq: plan.PointSeq, TaskID: plan.TaskID,
		EventsKept: plan.Keep, EventsDropped: len(events) - plan.Keep,
		ActivitiesPending: []api.ResetActivity{}, ActivitiesRerun: []api.ResetActivity{}, TimersPending: []api.ResetTimer{},
		SignalsReapplied: []api.ResetSignal{}, ValidPoints: decide.ResetPoints(events)}
	for _, a := range plan.Pending {
		v.ActivitiesPending = append(v.ActivitiesPending, api.ResetActivity{ActivityID: a.ID, ActivityName: a.Name, IdempotencyKey: a.Key})
	}
	for _, a := range plan.Rerun {
		v.ActivitiesRerun = append(v.ActivitiesRerun, api.ResetActivity{ActivityID: a.ID, ActivityName: a.Name, IdempotencyKey: a.Key})
	}
	for _, t := range plan.Timers {
		v.TimersPending = append(v.TimersPending, api.ResetTimer{TimerID: t.ID, FireAt: t.FireAt})
	}
	if reapply {
		for _, ev := range plan.Signals {
			var a wire.SignalReceivedAttrs
			_ = json.Unmarshal(ev.Attrs, &a)
			v.SignalsReapplied = append(v.SignalsReapplied, api.ResetSignal{Seq: ev.Seq, SignalName: a.SignalName, IdempotencyKey: a.IdempotencyKey})
		}
	}
	return v
}
