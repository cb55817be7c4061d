package ingest

import (
	"cmp"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Schedules (docs/schedules.md). Every change to a schedule is a command
// on the schedule's shard, applied by the scheduler that owns it, as a
// start is; reads answer from its row and its ledger.

// scheduleMembers are the string members of a schedule's body, by the
// code their refusal gets.
var scheduleMembers = map[string]string{
	"workflow": api.CodeInvalidWorkflowName, "task_queue": api.CodeInvalidTaskQueue, "spec": api.CodeInvalidScheduleSpec,
	"overlap": api.CodeInvalidScheduleSpec, "catchup_window": api.CodeInvalidScheduleSpec, "workflow_id_template": api.CodeInvalidScheduleSpec,
	"note": api.CodeInvalidScheduleSpec,
}

// pathScheduleID reads the path's schedule id; it answers 400
// invalid_schedule_id and reports false for one that is none.
func pathScheduleID(w http.ResponseWriter, r *http.Request) (string, bool) {
	id := r.PathValue("schedule_id")
	if !schedspec.ValidID(id) {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidScheduleID, "schedule_id",
			fmt.Sprintf("schedule id %q: want 1 to 128 letters, digits, '_', '-' or '.'", shownName(id)))
		return "", false
	}
	return id, true
}

// scheduleShard is the shard that keeps the schedule id.
func (s *Server) scheduleShard(id string) int {
	return s.cfg.Topology.Layout().ScheduleShard(id)
}

// readSchedule reads the schedule id and its latest fire: 404
// schedule_not_found (or a token limited to other workflows than its
// own), 503 when the store cannot be read; ok false when it answered.
func (s *Server) readSchedule(w http.ResponseWriter, r *http.Request, id string) (*store.Schedule, *store.ScheduleFire, bool) {
	if !s.readable(w) {
		return nil, nil, false
	}
	rctx, cancel := s.readContext(r.Context())
	defer cancel()
	sc, last, err := store.GetSchedule(rctx, s.poolOfShard(s.scheduleShard(id)), id)
	if err == nil && !sees(r.Context(), sc.Definition.Workflow) {
		err = store.ErrScheduleNotFound
	}
	if errors.Is(err, store.ErrScheduleNotFound) {
		writeError(w, http.StatusNotFound, api.CodeScheduleNotFound, fmt.Sprintf("no schedule %q", id))
		return nil, nil, false
	}
	if err != nil {
		s.readError(w, id, err)
		return nil, nil, false
	}
	return sc, last, true
}

// CheckSchedule checks a schedule's definition, and fills in its
// defaults: its task queue (the workflow's configured one), overlap
// (skip), catch-up window (1h) and workflow_id template. The workflow
// must be one a worker serves, or the configuration declares.
func (s *Server) checkSchedule(ctx context.Context, id string, req *api.ScheduleRequest) *rejection {
	if dedup.ValidateName(req.Workflow) != nil {
		return reject(http.StatusBadRequest, api.CodeInvalidWorkflowName, "workflow",
			fmt.Sprintf("workflow %q: want a workflow name, 1 to %d bytes of letters, digits, '_' and '-'", shownName(req.Workflow), dedup.MaxNameBytes))
	}
	var queue *string
	if req.TaskQueue != "" {
		queue = &req.TaskQueue
	}
	q, rej := s.startQueue(req.Workflow, queue)
	if rej != nil {
		return rej
	}
	req.TaskQueue = q
	if _, err := schedspec.CheckRequest(req); err != nil {
		var fe *schedspec.FieldError
		if errors.As(err, &fe) {
			return reject(http.StatusBadRequest, fe.Code, fe.Field, fe.Message)
		}
		return reject(http.StatusBadRequest, api.CodeInvalidScheduleSpec, "spec", err.Error())
	}
	// The longest workflow_id the template makes: its nominal time at
	// its longest.
	longest := schedspec.WorkflowID(req.WorkflowIDTemplate, id, time.Date(2000, 12, 31, 23, 59, 59, 999999999, time.UTC))
	if len(longest) > maxWorkflowIDBytes {
		return reject(http.StatusBadRequest, api.CodeInvalidScheduleSpec, "workflow_id_template",
			fmt.Sprintf("workflow_id_template: makes workflow ids of up to %d bytes (%q), beyond the %d a workflow_id may have", len(longest), longest, maxWorkflowIDBytes))
	}
	if rej := s.checkKnown(ctx, req.Workflow, req.TaskQueue); rej != nil {
		rej.body.Field = "workflow"
		return rej
	}
	if rej := s.checkSearchAttributes(req.Workflow, req.SearchAttributes); rej != nil {
		return rej
	}
	req.Overlap = cmp.Or(req.Overlap, api.OverlapSkip)
	req.CatchupWindow = cmp.Or(req.CatchupWindow, schedspec.DefaultCatchupWindow.String())
	req.WorkflowIDTemplate = cmp.Or(req.WorkflowIDTemplate, schedspec.DefaultWorkflowIDTemplate)
	return nil
}

// handlePutSchedule is PUT /api/harvest/schedules/{schedule_id}: it
// creates (201) or replaces (200) the schedule, and answers it as GET
// does.
func (s *Server) handlePutSchedule(w http.ResponseWriter, r *http.Request) {
	id, ok := pathScheduleID(w, r)
	if !ok {
		return
	}
	body, rej := s.readBody(w, r)
	if rej == nil && len(body) == 0 {
		rej = reject(http.StatusBadRequest, api.CodeInvalidJSON, "", "a schedule's body is a JSON object: {\"workflow\": …, \"spec\": {…}}")
	}
	var req api.ScheduleRequest
	if rej == nil {
		var unknown *rejection
		if unknown, rej = decodeObject(body, &req, "a schedule's body"); rej == nil {
			rej = unknown
		}
	}
	if rej == nil {
		rej = unstorableBody(body, scheduleMembers)
	}
	if rej == nil && !sees(r.Context(), req.Workflow) {
		s.mayUse(w, r, req.Workflow)
		return
	}
	if rej == nil {
		rej = s.checkSchedule(r.Context(), id, &req)
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	if !s.readable(w) {
		return
	}
	if limited(r.Context()) {
		// A token limited to some workflows replaces only a schedule of
		// one of them.
		rctx, cancel := s.readContext(r.Context())
		prior, _, err := store.GetSchedule(rctx, s.poolOfShard(s.scheduleShard(id)), id)
		cancel()
		switch {
		case err == nil && !s.mayUse(w, r, prior.Definition.Workflow):
			return
		case err != nil && !errors.Is(err, store.ErrScheduleNotFound):
			s.readError(w, id, err)
			return
		}
	}
	cmd := &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule,
		Schedule: &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpPut, Definition: &req, Source: wire.ScheduleSourceAPI}}
	out, ok := s.submitSchedule(w, r, id, cmd, "schedule")
	if !ok {
		return
	}
	sc, last, ok := s.readSchedule(w, r, id)
	if !ok {
		return
	}
	status := http.StatusOK
	if out.Status == "created" {
		status = http.StatusCreated
	}
	writeJSON(w, status, sc.View(last))
}

// submitSchedule publishes a schedule command on its shard and waits for
// its outcome; it answers what went wrong (a refusal, 202 for an outcome
// that is late) and reports false then.
func (s *Server) submitSchedule(w http.ResponseWriter, r *http.Request, id string, cmd *wire.Command, what string) (wire.Outcome, bool) {
	out, _, err := s.submit(r.Context(), s.scheduleShard(id), cmd, cmd.CommandID)
	switch {
	case errors.Is(err, errNotAccepted):
		status, body := notAccepted(err, what)
		writeAnswer(w, status, body)
		return out, false
	case errors.Is(err, errOutcomeLate):
		writeJSON(w, http.StatusAccepted, api.AcceptedResponse{CommandID: cmd.CommandID, Status: "accepted"})
		return out, false
	case out.Error != "":
		writeJSON(w, out.HTTPStatus, api.ErrorResponse{Error: out.Error, Message: out.Message})
		return out, false
	}
	return out, true
}

// handleGetSchedule is GET /api/harvest/schedules/{schedule_id}.
func (s *Server) handleGetSchedule(w http.ResponseWriter, r *http.Request) {
	id, ok := pathScheduleID(w, r)
	if !ok {
		return
	}
	sc, last, ok := s.readSchedule(w, r, id)
	if !ok {
		return
	}
	writeJSON(w, http.StatusOK, sc.View(last))
}

// handleListSchedules is GET /api/harvest/schedules: a page of the
// schedules by id, across the stores.
func (s *Server) handleListSchedules(w http.ResponseWriter, r *http.Request) {
	if !s.readable(w) {
		return
	}
	q := r.URL.Query()
	limit, ok := queryLimit(w, q, 100)
	if !ok {
		return
	}
	after := ""
	if c := q.Get("cursor"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		if err != nil || !schedspec.ValidID(string(raw)) {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidCursor, "cursor", "cursor is not one a listing of schedules answered")
			return
		}
		after = string(raw)
	}
	rctx, cancel := s.readContext(r.Context())
	defer cancel()
	var all []*store.Schedule
	for _, pool := range s.pools() {
		// A limited token's schedules only; one more than a page holds,
		// to know whether there are more.
		page, err := store.ListSchedules(rctx, pool, after, limit+1, limitedTo(r.Context()))
		if err != nil {
			s.readError(w, "", err)
			return
		}
		all = append(all, page...)
	}
	out := api.ScheduleList{Schedules: []api.Schedule{}}
	sortSchedules(all)
	var page []*store.Schedule
	for _, sc := range all {
		if !sees(r.Context(), sc.Definition.Workflow) {
			continue
		}
		if len(page) == limit {
			out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(page[limit-1].ScheduleID))
			break
		}
		page = append(page, sc)
	}
	// Each with its latest fire: one read per store.
	last := map[string]*store.ScheduleFire{}
	byPool := map[int][]string{}
	layout := s.cfg.Topology.Layout()
	for _, sc := range page {
		i := layout.StoreOfShard(sc.Shard)
		byPool[i] = append(byPool[i], sc.ScheduleID)
	}
	for i, ids := range byPool {
		fires, err := store.LastFires(rctx, s.pool(i), ids)
		if err != nil {
			s.readError(w, "", err)
			return
		}
		maps.Copy(last, fires)
	}
	for _, sc := range page {
		out.Schedules = append(out.Schedules, sc.View(last[sc.ScheduleID]))
	}
	writeJSON(w, http.StatusOK, out)
}

func sortSchedules(all []*store.Schedule) {
	for i := 1; i < len(all); i++ {
		for j := i; j > 0 && all[j].ScheduleID < all[j-1].ScheduleID; j-- {
			all[j], all[j-1] = all[j-1], all[j]
		}
	}
}

// handleScheduleFires is GET /api/harvest/schedules/{schedule_id}/fires:
// a page of its ledger, newest nominal time first.
func (s *Server) handleScheduleFires(w http.ResponseWriter, r *http.Request) {
	id, ok := pathScheduleID(w, r)
	if !ok {
		return
	}
	q := r.URL.Query()
	limit, ok := queryLimit(w, q, 100)
	if !ok {
		return
	}
	var before *store.FireRef
	if c := q.Get("cursor"); c != "" {
		raw, err := base64.RawURLEncoding.DecodeString(c)
		at, trigger, found := strings.Cut(string(raw), "|")
		t, terr := time.Parse(time.RFC3339Nano, at)
		if err != nil || !found || terr != nil {
			writeFieldError(w, http.StatusBadRequest, api.CodeInvalidCursor, "cursor", "cursor is not one a listing of fires answered")
			return
		}
		before = &store.FireRef{ScheduleID: id, Nominal: t, Trigger: trigger}
	}
	if _, _, ok := s.readSchedule(w, r, id); !ok {
		return
	}
	rctx, cancel := s.readContext(r.Context())
	defer cancel()
	fires, err := store.ListFires(rctx, s.poolOfShard(s.scheduleShard(id)), id, before, limit+1)
	if err != nil {
		s.readError(w, id, err)
		return
	}
	out := api.ScheduleFireList{Fires: []api.ScheduleFire{}}
	for i, f := range fires {
		if i == limit {
			last := fires[limit-1]
			out.NextCursor = base64.RawURLEncoding.EncodeToString([]byte(last.Nominal.UTC().Format(time.RFC3339Nano) + "|" + last.Trigger))
			break
		}
		out.Fires = append(out.Fires, f.View())
	}
	writeJSON(w, http.StatusOK, out)
}

// handleDeleteSchedule is DELETE /api/harvest/schedules/{schedule_id}:
// the schedule and its ledger go; what it started runs on.
func (s *Server) handleDeleteSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, wire.ScheduleOpDelete, "deleted")
}

// handlePauseSchedule is POST /api/harvest/schedules/{schedule_id}/pause.
func (s *Server) handlePauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, wire.ScheduleOpPause, "paused")
}

// handleUnpauseSchedule is POST
// /api/harvest/schedules/{schedule_id}/unpause.
func (s *Server) handleUnpauseSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, wire.ScheduleOpUnpause, "unpaused")
}

// handleTriggerSchedule is POST
// /api/harvest/schedules/{schedule_id}/trigger: it fires now, under the
// schedule's overlap policy, paused or not.
func (s *Server) handleTriggerSchedule(w http.ResponseWriter, r *http.Request) {
	s.scheduleAction(w, r, wire.ScheduleOpTrigger, "triggered")
}

// scheduleAction applies op (delete, pause, unpause, trigger) to the
// path's schedule and answers what was done.
func (s *Server) scheduleAction(w http.ResponseWriter, r *http.Request, op, done string) {
	id, ok := pathScheduleID(w, r)
	if !ok {
		return
	}
	cmd := &wire.ScheduleCommand{ScheduleID: id, Op: op}
	if op == wire.ScheduleOpPause || op == wire.ScheduleOpUnpause {
		body, rej := s.readBody(w, r)
		var req api.SchedulePauseRequest
		if rej == nil && len(body) > 0 {
			var unknown *rejection
			if unknown, rej = decodeObject(body, &req, "a pause's body"); rej == nil {
				rej = unknown
			}
			if rej == nil {
				rej = unstorableBody(body, map[string]string{"note": api.CodeInvalidScheduleSpec})
			}
		}
		if rej == nil && len(req.Note) > schedspec.MaxNoteBytes {
			rej = reject(http.StatusBadRequest, api.CodeInvalidScheduleSpec, "note", fmt.Sprintf("note: %d bytes, want at most %d", len(req.Note), schedspec.MaxNoteBytes))
		}
		if rej != nil {
			writeJSON(w, rej.status, rej.body)
			return
		}
		cmd.Note = req.Note
	}
	if _, _, ok := s.readSchedule(w, r, id); !ok {
		return
	}
	resp := api.ScheduleActionResponse{ScheduleID: id, Action: done}
	if op == wire.ScheduleOpTrigger {
		cmd.At = time.Now().UTC().Truncate(time.Millisecond)
		resp.Fires = []time.Time{cmd.At}
	}
	if _, ok := s.submitSchedule(w, r, id, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule, Schedule: cmd}, "schedule "+op); !ok {
		return
	}
	writeJSON(w, http.StatusOK, resp)
}

// handleBackfillSchedule is POST
// /api/harvest/schedules/{schedule_id}/backfill: every nominal time of
// the spec from start to end fires now.
func (s *Server) handleBackfillSchedule(w http.ResponseWriter, r *http.Request) {
	id, ok := pathScheduleID(w, r)
	if !ok {
		return
	}
	body, rej := s.readBody(w, r)
	var req api.ScheduleBackfillRequest
	if rej == nil {
		var unknown *rejection
		if unknown, rej = decodeObject(body, &req, "a backfill's body"); rej == nil {
			rej = unknown
		}
	}
	bad := func(field, msg string) *rejection {
		return reject(http.StatusBadRequest, api.CodeInvalidBackfill, field, msg)
	}
	switch {
	case rej != nil:
	case req.Start.IsZero():
		rej = bad("start", "start: want the first nominal time to fire, RFC 3339")
	case req.End.IsZero():
		rej = bad("end", "end: want the last nominal time to fire, RFC 3339")
	case req.End.Before(req.Start):
		rej = bad("end", "end is before start")
	case req.End.After(time.Now()):
		rej = bad("end", "end is in the future: the spec fires those times as they come")
	case !schedspec.ValidOverlap(req.Overlap):
		rej = bad("overlap", fmt.Sprintf("overlap %q: want %s", req.Overlap, schedspec.Overlaps))
	}
	if rej != nil {
		writeJSON(w, rej.status, rej.body)
		return
	}
	sc, _, ok := s.readSchedule(w, r, id)
	if !ok {
		return
	}
	spec, err := schedspec.Parse(sc.Definition.Spec)
	if err != nil {
		writeError(w, http.StatusBadRequest, api.CodeInvalidScheduleSpec, err.Error())
		return
	}
	var fires []time.Time
	for t := req.Start.Add(-time.Nanosecond); ; {
		var ok bool
		if t, ok = spec.Next(t); !ok || t.After(req.End) {
			break
		}
		if len(fires) == api.MaxBackfillFires {
			writeJSON(w, http.StatusBadRequest, bad("end", fmt.Sprintf("the range holds more than %d nominal times: backfill it in parts", api.MaxBackfillFires)).body)
			return
		}
		fires = append(fires, t)
	}
	cmd := &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpBackfill, Start: req.Start.UTC(), End: req.End.UTC(), Overlap: req.Overlap}
	if _, ok := s.submitSchedule(w, r, id, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule, Schedule: cmd}, "backfill"); !ok {
		return
	}
	writeJSON(w, http.StatusOK, api.ScheduleActionResponse{ScheduleID: id, Action: "backfilled", Fires: fires})
}
