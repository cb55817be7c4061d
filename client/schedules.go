package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/harvest-engine/harvest/api"
)

// Schedules (docs/schedules.md): a workflow started at the times a spec
// gives, each fire an idempotent start keyed by the schedule and its
// nominal time.

// ScheduleRequest is api.ScheduleRequest.
type ScheduleRequest = api.ScheduleRequest

// ScheduleSpec is api.ScheduleSpec.
type ScheduleSpec = api.ScheduleSpec

// Schedule is api.Schedule.
type Schedule = api.Schedule

// ScheduleNextFire is api.ScheduleNextFire.
type ScheduleNextFire = api.ScheduleNextFire

// ScheduleFire is api.ScheduleFire.
type ScheduleFire = api.ScheduleFire

// ScheduleList is api.ScheduleList.
type ScheduleList = api.ScheduleList

// ScheduleFireList is api.ScheduleFireList.
type ScheduleFireList = api.ScheduleFireList

// SchedulePauseRequest is api.SchedulePauseRequest.
type SchedulePauseRequest = api.SchedulePauseRequest

// ScheduleBackfillRequest is api.ScheduleBackfillRequest.
type ScheduleBackfillRequest = api.ScheduleBackfillRequest

// ScheduleActionResponse is api.ScheduleActionResponse.
type ScheduleActionResponse = api.ScheduleActionResponse

// Overlap policies of ScheduleRequest.Overlap and
// ScheduleBackfillRequest.Overlap: what a fire does while an execution an
// earlier fire started still runs. Empty is OverlapSkip.
const (
	OverlapSkip           = api.OverlapSkip
	OverlapBufferOne      = api.OverlapBufferOne
	OverlapBufferAll      = api.OverlapBufferAll
	OverlapCancelOther    = api.OverlapCancelOther
	OverlapTerminateOther = api.OverlapTerminateOther
	OverlapAllowAll       = api.OverlapAllowAll
)

// The values of ScheduleSpec.RepeatedTime.
const (
	RepeatedTimeFirst = api.RepeatedTimeFirst
	RepeatedTimeBoth  = api.RepeatedTimeBoth
)

// Outcomes of a fire: ScheduleFire.Outcome.
const (
	FireStarting       = api.FireStarting
	FireStarted        = api.FireStarted
	FireDeduplicated   = api.FireDeduplicated
	FireSkippedOverlap = api.FireSkippedOverlap
	FireBuffered       = api.FireBuffered
	FireMissedCatchup  = api.FireMissedCatchup
	FirePaused         = api.FirePaused
	FireStartFailed    = api.FireStartFailed
)

// What made a fire: ScheduleFire.Trigger.
const (
	FireBySpec     = api.FireBySpec
	FireByTrigger  = api.FireByTrigger
	FireByBackfill = api.FireByBackfill
)

// ListSchedulesOptions pages ListSchedules. The zero value is the first
// page, of the server's default size (100).
type ListSchedulesOptions struct {
	// Limit is 1 to 500.
	Limit int
	// Cursor continues a listing: the NextCursor of its previous page.
	Cursor string
}

// ListFiresOptions pages ScheduleFires. The zero value is the first page
// (the newest fires), of the server's default size (100).
type ListFiresOptions struct {
	// Limit is 1 to 500.
	Limit int
	// Cursor continues a listing: the NextCursor of its previous page.
	Cursor string
}

// schedulePath is the path of the schedule id, with suffix ("/pause")
// after it; op names the method in the error of an empty id.
func schedulePath(op, id, suffix string) (string, error) {
	if id == "" {
		return "", fmt.Errorf("client: %s: schedule id is required", op)
	}
	return apiPrefix + "/schedules/" + url.PathEscape(id) + suffix, nil
}

// pageQuery is the query of a paged read.
func pageQuery(limit int, cursor string) url.Values {
	q := url.Values{}
	if limit != 0 {
		q.Set("limit", strconv.Itoa(limit))
	}
	if cursor != "" {
		q.Set("cursor", cursor)
	}
	return q
}

// scheduleAnswer is the answer to a request that changes a schedule.
type scheduleAnswer struct {
	status int
	body   []byte
	// late is the outcome's status ("created", "paused", …) of a command
	// the server answered 202 for, its scheduler's outcome being late:
	// the command was polled until applied, and body is not the route's
	// answer. Empty when the server answered at once.
	late string
}

// changeSchedule sends a request that changes a schedule. Every such
// change is a command the schedule's scheduler applies; when its outcome
// comes late the server answers 202 with the command's id, and the
// command is polled until it is applied, within ctx (a refusal then is
// an *APIError, as it would have been at once).
func (c *Client) changeSchedule(ctx context.Context, method, path string, body []byte) (*scheduleAnswer, error) {
	resp, err := c.do(ctx, method, path, nil, body)
	if err != nil {
		return nil, err
	}
	if resp.status != http.StatusAccepted {
		return &scheduleAnswer{status: resp.status, body: resp.body}, nil
	}
	var acc AcceptedResponse
	if err := decode(method, path, resp.body, &acc); err != nil {
		return nil, err
	}
	cmd, err := c.awaitCommand(ctx, acc.CommandID)
	if err != nil {
		return nil, err
	}
	var out struct {
		Status string `json:"status"`
	}
	if err := decode(method, path, cmd.Outcome, &out); err != nil {
		return nil, err
	}
	return &scheduleAnswer{status: cmd.HTTPStatus, body: cmd.Outcome, late: out.Status}, nil
}

// PutSchedule creates the schedule id, or replaces its definition
// (PUT /api/harvest/schedules/{id}), and returns it as GetSchedule does;
// created says this call created it. A replaced schedule keeps where its
// firing stands: the new spec's times after it fire. A definition the
// server refuses is an *APIError: invalid_schedule_spec or
// invalid_timezone naming the field (APIError.Field, such as
// "spec.cron[0]"), invalid_schedule_id, unknown_workflow.
func (c *Client) PutSchedule(ctx context.Context, id string, req ScheduleRequest) (*Schedule, bool, error) {
	path, err := schedulePath("PutSchedule", id, "")
	if err != nil {
		return nil, false, err
	}
	body, err := json.Marshal(req)
	if err != nil {
		return nil, false, fmt.Errorf("client: PutSchedule: %w", err)
	}
	a, err := c.changeSchedule(ctx, http.MethodPut, path, body)
	if err != nil {
		return nil, false, err
	}
	if a.late != "" {
		// The late outcome says what was done, not what the schedule is.
		sc, err := c.GetSchedule(ctx, id)
		if err != nil {
			return nil, false, err
		}
		return sc, a.late == "created", nil
	}
	var sc Schedule
	if err := decode(http.MethodPut, path, a.body, &sc); err != nil {
		return nil, false, err
	}
	return &sc, a.status == http.StatusCreated, nil
}

// GetSchedule reads the schedule id: its definition, whether it is
// paused, its next fires, the fires whose executions run, those
// buffered, and its latest fire. An unknown id is an *APIError matching
// ErrScheduleNotFound.
func (c *Client) GetSchedule(ctx context.Context, id string) (*Schedule, error) {
	path, err := schedulePath("GetSchedule", id, "")
	if err != nil {
		return nil, err
	}
	var sc Schedule
	if err := c.get(ctx, path, &sc); err != nil {
		return nil, err
	}
	return &sc, nil
}

// ListSchedules lists a page of the schedules, by id; its NextCursor,
// when not empty, is opts.Cursor for the next page. The schedules of a
// page have no LastFire: GetSchedule reads it.
func (c *Client) ListSchedules(ctx context.Context, opts ListSchedulesOptions) (*ScheduleList, error) {
	path := withQuery(apiPrefix+"/schedules", pageQuery(opts.Limit, opts.Cursor))
	var a ScheduleList
	if err := c.get(ctx, path, &a); err != nil {
		return nil, err
	}
	if a.Schedules == nil {
		a.Schedules = []Schedule{}
	}
	return &a, nil
}

// ScheduleFires reads a page of the schedule's ledger of fires, newest
// nominal time first; its NextCursor, when not empty, is opts.Cursor for
// the next page. An unknown id is an *APIError matching
// ErrScheduleNotFound.
func (c *Client) ScheduleFires(ctx context.Context, id string, opts ListFiresOptions) (*ScheduleFireList, error) {
	path, err := schedulePath("ScheduleFires", id, "/fires")
	if err != nil {
		return nil, err
	}
	var a ScheduleFireList
	if err := c.get(ctx, withQuery(path, pageQuery(opts.Limit, opts.Cursor)), &a); err != nil {
		return nil, err
	}
	if a.Fires == nil {
		a.Fires = []ScheduleFire{}
	}
	return &a, nil
}

// DeleteSchedule deletes the schedule id and its ledger; the executions
// it started run on. An unknown id is an *APIError matching
// ErrScheduleNotFound.
func (c *Client) DeleteSchedule(ctx context.Context, id string) (*ScheduleActionResponse, error) {
	return c.scheduleAction(ctx, "DeleteSchedule", http.MethodDelete, id, "", nil)
}

// PauseSchedule pauses the schedule id, with note (empty for none): the
// times that pass while it is paused are recorded as paused, and start
// nothing.
func (c *Client) PauseSchedule(ctx context.Context, id, note string) (*ScheduleActionResponse, error) {
	return c.scheduleAction(ctx, "PauseSchedule", http.MethodPost, id, "/pause", pauseBody(note))
}

// UnpauseSchedule unpauses the schedule id, with note (empty clears the
// pause's): its next times fire, and the fires it buffered start.
func (c *Client) UnpauseSchedule(ctx context.Context, id, note string) (*ScheduleActionResponse, error) {
	return c.scheduleAction(ctx, "UnpauseSchedule", http.MethodPost, id, "/unpause", pauseBody(note))
}

// pauseBody is the body of a pause or unpause: none without a note.
func pauseBody(note string) any {
	if note == "" {
		return nil
	}
	return SchedulePauseRequest{Note: note}
}

// TriggerSchedule fires the schedule id now, under its overlap policy,
// paused or not. The answer's Fires holds the nominal time it fired,
// unless the server's outcome came late (it answered 202).
func (c *Client) TriggerSchedule(ctx context.Context, id string) (*ScheduleActionResponse, error) {
	return c.scheduleAction(ctx, "TriggerSchedule", http.MethodPost, id, "/trigger", nil)
}

// BackfillSchedule fires every nominal time of the schedule's spec from
// req.Start to req.End (both included, at most api.MaxBackfillFires),
// now, under req.Overlap (empty: the schedule's). A time that fired
// before starts nothing new: its fire is recorded deduplicated. The
// answer's Fires are the nominal times fired, unless the server's
// outcome came late (it answered 202). A range that is none, or holds too
// many times, is an *APIError with the code invalid_backfill.
func (c *Client) BackfillSchedule(ctx context.Context, id string, req ScheduleBackfillRequest) (*ScheduleActionResponse, error) {
	return c.scheduleAction(ctx, "BackfillSchedule", http.MethodPost, id, "/backfill", req)
}

// scheduleAction is DeleteSchedule and the POST actions (op names the
// method in errors): it sends req as the body (nil: none) to the
// schedule's path with suffix, and reads the answer.
func (c *Client) scheduleAction(ctx context.Context, op, method, id, suffix string, req any) (*ScheduleActionResponse, error) {
	path, err := schedulePath(op, id, suffix)
	if err != nil {
		return nil, err
	}
	var body []byte
	if req != nil {
		if body, err = json.Marshal(req); err != nil {
			return nil, fmt.Errorf("client: %s: %w", op, err)
		}
	}
	a, err := c.changeSchedule(ctx, method, path, body)
	if err != nil {
		return nil, err
	}
	if a.late != "" {
		// A late outcome names what was done; the nominal times a
		// trigger or backfill fired are in the ledger (ScheduleFires).
		return &ScheduleActionResponse{ScheduleID: id, Action: a.late}, nil
	}
	var r ScheduleActionResponse
	if err := decode(method, path, a.body, &r); err != nil {
		return nil, err
	}
	return &r, nil
}
