package harvesttest

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schedspec"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Schedules (docs/schedules.md) on the Env's clock: a schedule fires as
// Advance passes its times, each fire starting its workflow as a
// deployment's does, so that a test can check what a spec fires across
// daylight-saving transitions, what an overlap policy skips, and what
// its executions do.

// PutSchedule creates or replaces the schedule id, as PUT
// /api/harvest/schedules/{id} does: the definition is checked as the API
// checks it (its workflow must be registered), and refused with the
// API's error.
func (e *Env) PutSchedule(ctx context.Context, id string, req api.ScheduleRequest) (api.Schedule, error) {
	if !schedspec.ValidID(id) {
		return api.Schedule{}, &client.APIError{StatusCode: http.StatusBadRequest, Code: api.CodeInvalidScheduleID, Field: "schedule_id",
			Message: fmt.Sprintf("schedule id %q: want 1 to 128 letters, digits, '_', '-' or '.'", id)}
	}
	if _, err := schedspec.CheckRequest(&req); err != nil {
		var fe *schedspec.FieldError
		if errors.As(err, &fe) {
			return api.Schedule{}, &client.APIError{StatusCode: http.StatusBadRequest, Code: fe.Code, Field: fe.Field, Message: fe.Message}
		}
		return api.Schedule{}, err
	}
	if !slices.Contains(e.worker.Workflows(), req.Workflow) {
		return api.Schedule{}, &client.APIError{StatusCode: http.StatusNotFound, Code: client.CodeUnknownWorkflow, Field: "workflow",
			Message: fmt.Sprintf("no worker serves workflow %q", req.Workflow)}
	}
	if err := checkJSON(req.Input); err != nil {
		return api.Schedule{}, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodePayloadUnstorable, Field: "input", Message: "input " + err.Error()}
	}
	if err := searchattr.Schema(e.cfg.SearchAttributes).Check(req.Workflow, req.SearchAttributes); err != nil {
		return api.Schedule{}, &client.APIError{StatusCode: http.StatusBadRequest, Code: client.CodeInvalidSearchAttribute, Field: "search_attributes", Message: err.Error()}
	}
	req.TaskQueue = cmp.Or(req.TaskQueue, wire.DefaultTaskQueue)
	req.Overlap = cmp.Or(req.Overlap, api.OverlapSkip)
	req.CatchupWindow = cmp.Or(req.CatchupWindow, schedspec.DefaultCatchupWindow.String())
	req.WorkflowIDTemplate = cmp.Or(req.WorkflowIDTemplate, schedspec.DefaultWorkflowIDTemplate)
	if err := e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpPut, Definition: &req, Source: wire.ScheduleSourceAPI}); err != nil {
		return api.Schedule{}, err
	}
	return e.Schedule(id)
}

// Schedule is the schedule id as GET /api/harvest/schedules/{id}
// answers it, with its next fires.
func (e *Env) Schedule(id string) (api.Schedule, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	sc, fires, ok := e.mem.Schedule(id)
	if !ok {
		return api.Schedule{}, scheduleNotFound(id)
	}
	if len(fires) > 0 {
		return sc.View(&fires[0]), nil
	}
	return sc.View(nil), nil
}

// ScheduleFires is the schedule's ledger, newest nominal time first, as
// GET /api/harvest/schedules/{id}/fires pages it.
func (e *Env) ScheduleFires(id string) ([]api.ScheduleFire, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	_, fires, ok := e.mem.Schedule(id)
	if !ok {
		return nil, scheduleNotFound(id)
	}
	out := make([]api.ScheduleFire, 0, len(fires))
	for i := range fires {
		out = append(out, fires[i].View())
	}
	return out, nil
}

// PauseSchedule pauses the schedule with note: its times are recorded
// as paused as they pass.
func (e *Env) PauseSchedule(ctx context.Context, id, note string) error {
	return e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpPause, Note: note})
}

// UnpauseSchedule unpauses the schedule with note.
func (e *Env) UnpauseSchedule(ctx context.Context, id, note string) error {
	return e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpUnpause, Note: note})
}

// TriggerSchedule fires the schedule now, under its overlap policy.
func (e *Env) TriggerSchedule(ctx context.Context, id string) error {
	return e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpTrigger, At: e.Now()})
}

// BackfillSchedule fires every nominal time of the schedule's spec from
// start to end now, under overlap ("": the schedule's).
func (e *Env) BackfillSchedule(ctx context.Context, id string, start, end time.Time, overlap string) error {
	if end.Before(start) || !schedspec.ValidOverlap(overlap) {
		return &client.APIError{StatusCode: http.StatusBadRequest, Code: api.CodeInvalidBackfill, Message: "want start no later than end, and an overlap policy"}
	}
	return e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpBackfill, Start: start.UTC(), End: end.UTC(), Overlap: overlap})
}

// DeleteSchedule deletes the schedule and its ledger.
func (e *Env) DeleteSchedule(ctx context.Context, id string) error {
	return e.scheduleOp(ctx, &wire.ScheduleCommand{ScheduleID: id, Op: wire.ScheduleOpDelete})
}

// scheduleOp applies a schedule command now and runs what it started.
func (e *Env) scheduleOp(ctx context.Context, cmd *wire.ScheduleCommand) error {
	e.run.Lock()
	defer e.run.Unlock()
	e.mu.Lock()
	out, err := e.apply(ctx, &wire.Command{CommandID: dedup.NewID(), Kind: wire.KindSchedule, Schedule: cmd})
	e.mu.Unlock()
	if err != nil {
		return err
	}
	if out.Error != "" {
		return refused(out)
	}
	return e.drain(ctx)
}

func scheduleNotFound(id string) error {
	return &client.APIError{StatusCode: http.StatusNotFound, Code: api.CodeScheduleNotFound, Message: fmt.Sprintf("no schedule %q", id)}
}
