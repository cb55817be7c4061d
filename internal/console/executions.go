package console

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// statuses are the execution statuses, for the filter.
var statuses = []string{
	api.StatusPending, api.StatusRunning, api.StatusCompleted, api.StatusFailed,
	api.StatusCancelled, api.StatusTerminated, api.StatusTimedOut, api.StatusContinuedAsNew,
}

// filter is the executions page's filter, as its URL carries it.
type filter struct {
	Workflow, Status, Key, WorkflowID, From, To string
}

// filterOf reads the filter from the page's query.
func filterOf(q url.Values) filter {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	return filter{Workflow: get("workflow"), Status: get("status"), Key: get("key"), WorkflowID: get("workflow_id"), From: get("from"), To: get("to")}
}

// query is the filter as the console's own URL query.
func (f filter) query() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"workflow": f.Workflow, "status": f.Status, "key": f.Key, "workflow_id": f.WorkflowID, "from": f.From, "to": f.To} {
		if v != "" {
			q.Set(name, v)
		}
	}
	return q
}

// parseTime reads a time the filter form gives: RFC 3339, or the
// browser's datetime-local form (taken as UTC).
func parseTime(s string) (time.Time, error) {
	for _, layout := range []string{time.RFC3339Nano, "2006-01-02T15:04:05", "2006-01-02T15:04", "2006-01-02"} {
		if t, err := time.Parse(layout, s); err == nil {
			return t, nil
		}
	}
	return time.Time{}, errors.New("want a time such as 2026-12-04T15:00 (UTC) or RFC 3339")
}

// apiQuery is the filter as GET /api/harvest/executions' parameters.
func (f filter) apiQuery() (url.Values, string) {
	q := url.Values{}
	for name, v := range map[string]string{"workflow": f.Workflow, "status": f.Status, "key_prefix": f.Key, "workflow_id_prefix": f.WorkflowID} {
		if v != "" {
			q.Set(name, v)
		}
	}
	for name, v := range map[string]string{"created_after": f.From, "created_before": f.To} {
		if v == "" {
			continue
		}
		t, err := parseTime(v)
		if err != nil {
			return nil, map[string]string{"created_after": "From", "created_before": "To"}[name] + ": " + err.Error()
		}
		q.Set(name, t.UTC().Format(time.RFC3339Nano))
	}
	return q, ""
}

type executionsData struct {
	Filter   filter
	Statuses []string
	Rows     []api.Execution
	// Problem is what the API refused in the filter.
	Problem string
	// Next is the URL of the next (older) page; First that of the newest.
	Next, First string
	Paged       bool
}

// pageSize is how many executions a page lists, as the API's limit
// parameter.
const pageSize = "50"

func (c *Console) handleExecutions(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := filterOf(r.URL.Query())
	data := executionsData{Filter: f, Statuses: statuses, First: "/ui/executions", Paged: r.URL.Query().Get("cursor") != ""}
	if q := f.query(); len(q) > 0 {
		data.First += "?" + q.Encode()
	}
	q, bad := f.apiQuery()
	if bad != "" {
		data.Problem = bad
		c.render(w, r, http.StatusBadRequest, "executions", "Executions", data)
		return
	}
	q.Set("limit", pageSize)
	if cur := r.URL.Query().Get("cursor"); cur != "" {
		q.Set("cursor", cur)
	}
	var list api.ListExecutionsResponse
	err := c.apiFor(r).call(ctx, http.MethodGet, "/api/harvest/executions", q, nil, &list)
	var apiErr *apiError
	if errors.As(err, &apiErr) && apiErr.status == http.StatusBadRequest {
		// A filter the API refuses: the page says which, and keeps it.
		data.Problem = apiErr.body.Message
		c.render(w, r, http.StatusBadRequest, "executions", "Executions", data)
		return
	}
	if err != nil {
		c.apiProblem(w, r, err)
		return
	}
	data.Rows = list.Executions
	if list.NextCursor != "" {
		next := f.query()
		next.Set("cursor", list.NextCursor)
		data.Next = "/ui/executions?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "executions", "Executions", data)
}

// activity is one activity of an execution, from its history.
type activity struct {
	ID        int
	Name      string
	Key       string
	Status    string
	Attempts  int
	Error     string
	Scheduled time.Time
	Closed    *time.Time
	Input     json.RawMessage
	Result    json.RawMessage
}

type signal struct {
	Name    string
	Key     string
	Payload json.RawMessage
	At      time.Time
	// Dup is what describe says of its key: the duplicates dropped.
	Dup *api.SignalKey
}

type timer struct {
	ID     int
	FireAt *time.Time
	Fired  *time.Time
	Set    time.Time
}

type event struct {
	Seq   int
	Type  string
	At    time.Time
	Attrs string
}

type executionData struct {
	E          api.Execution
	Activities []*activity
	Signals    []signal
	Timers     []*timer
	Events     []event
	// States are the execution's query states (harvest.SetQueryState);
	// StatesProblem says why they could not be read.
	States        []api.State
	StatesProblem string
	// Children are the child workflows it started (each linked to its
	// execution); the execution links to its parent (E.ParentExecutionID).
	Children []api.Child
	// Done is the outcome of an action just taken, to show once.
	Done string
}

func (c *Console) handleExecution(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	a := c.apiFor(r)
	var data executionData
	path := "/api/harvest/executions/" + url.PathEscape(id)
	if err := a.call(ctx, http.MethodGet, path, nil, nil, &data.E); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	var hist api.HistoryResponse
	if err := a.call(ctx, http.MethodGet, path+"/history", nil, nil, &hist); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	data.fromHistory(hist.Events)
	data.withSignalKeys()
	var states api.ListStatesResponse
	var apiErr *apiError
	switch err := a.call(ctx, http.MethodGet, path+"/state", nil, nil, &states); {
	case err == nil:
		data.States = states.States
	case errors.As(err, &apiErr) && apiErr.body.Error == api.CodeNotFound:
		// An API without query states: the page shows none.
	default:
		// The rest of the page stands without them.
		data.StatesProblem = err.Error()
	}
	var children api.ListChildrenResponse
	if err := a.call(ctx, http.MethodGet, path+"/children", nil, nil, &children); err == nil {
		data.Children = children.Children // an API without children: none shown
	}
	switch r.URL.Query().Get("done") {
	case "cancel":
		data.Done = "Cancellation requested."
	case "terminate":
		data.Done = "Termination requested."
	}
	c.render(w, r, http.StatusOK, "execution", "Execution "+id, data)
}

// fromHistory fills the activities, signals, timers and timeline from the
// execution's history.
func (d *executionData) fromHistory(events []api.Event) {
	acts := map[int]*activity{}
	timers := map[int]*timer{}
	for _, e := range events {
		d.Events = append(d.Events, event{Seq: e.Seq, Type: e.Type, At: e.At, Attrs: attrsOf(e)})
		switch e.Type {
		case wire.EventActivityScheduled:
			var at wire.ActivityScheduledAttrs
			if json.Unmarshal(e.Raw, &at) != nil {
				continue
			}
			act := &activity{ID: at.ActivityID, Name: at.ActivityName, Key: at.IdempotencyKey, Status: "Scheduled", Scheduled: e.At, Input: at.Input}
			acts[at.ActivityID] = act
			d.Activities = append(d.Activities, act)
		case wire.EventActivityCompleted, wire.EventActivityFailed, wire.EventActivityCancelled:
			var at wire.ActivityClosedAttrs
			if json.Unmarshal(e.Raw, &at) != nil {
				continue
			}
			act := acts[at.ActivityID]
			if act == nil {
				continue
			}
			closed := e.At
			act.Closed, act.Attempts, act.Result = &closed, at.Attempt, at.Result
			act.Status = strings.TrimPrefix(e.Type, "Activity")
			if at.Failure != nil {
				act.Error = at.Failure.Message
			}
		case wire.EventActivityCancelRequested:
			var at wire.ActivityCancelRequestedAttrs
			if json.Unmarshal(e.Raw, &at) != nil {
				continue
			}
			if act := acts[at.ActivityID]; act != nil && act.Closed == nil {
				act.Status = "CancelRequested" // until its attempt in flight ends
			}
		case wire.EventSignalReceived:
			var at wire.SignalReceivedAttrs
			if json.Unmarshal(e.Raw, &at) == nil {
				d.Signals = append(d.Signals, signal{Name: at.SignalName, Key: at.IdempotencyKey, Payload: at.Payload, At: e.At})
			}
		case wire.EventTimerStarted:
			var at wire.TimerAttrs
			if json.Unmarshal(e.Raw, &at) == nil {
				t := &timer{ID: at.TimerID, FireAt: at.FireAt, Set: e.At}
				timers[at.TimerID] = t
				d.Timers = append(d.Timers, t)
			}
		case wire.EventTimerFired:
			var at wire.TimerAttrs
			if json.Unmarshal(e.Raw, &at) == nil && timers[at.TimerID] != nil {
				fired := e.At
				timers[at.TimerID].Fired = &fired
			}
		}
	}
}

// withSignalKeys joins describe's keyed signals, with their duplicates,
// to the signals of the history.
func (d *executionData) withSignalKeys() {
	keys := map[string]*api.SignalKey{}
	for i := range d.E.SignalKeys {
		keys[d.E.SignalKeys[i].IdempotencyKey] = &d.E.SignalKeys[i]
	}
	for i := range d.Signals {
		if k := d.Signals[i].Key; k != "" {
			d.Signals[i].Dup = keys[k]
		}
	}
}

// attrsOf is an event's attributes as compact JSON, without the seq, type
// and at the timeline shows apart.
func attrsOf(e api.Event) string {
	if len(e.Attrs) == 0 {
		return ""
	}
	b, err := json.Marshal(e.Attrs)
	if err != nil {
		return ""
	}
	return compact(b)
}

// actions are what the execution page offers, by the route's name.
var actions = map[string]struct{ Verb, Explain string }{
	"cancel":    {"Cancel", "The workflow code is told: the activities and timers it waits for are given up, it may clean up, and its return closes the execution as Cancelled."},
	"terminate": {"Terminate", "The execution closes as Terminated, its error saying why: the workflow runs no further code, and workers are told to stop its activities in flight."},
}

type confirmData struct {
	E       api.Execution
	Action  string
	Verb    string
	Explain string
}

// handleConfirm is the confirmation page of an action: nothing changes
// until its form is posted.
func (c *Console) handleConfirm(w http.ResponseWriter, r *http.Request) {
	act, ok := actions[r.PathValue("action")]
	if !ok {
		c.problem(w, r, http.StatusNotFound, "Not found", "The console has no page at "+r.URL.Path+".")
		return
	}
	ctx := r.Context()
	data := confirmData{Action: r.PathValue("action"), Verb: act.Verb, Explain: act.Explain}
	if err := c.apiFor(r).call(ctx, http.MethodGet, "/api/harvest/executions/"+url.PathEscape(r.PathValue("id")), nil, nil, &data.E); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "confirm", act.Verb+" execution", data)
}

// handleAction posts the action to the API, as the CLI does, and goes
// back to the execution.
func (c *Console) handleAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if _, ok := actions[action]; !ok {
		c.problem(w, r, http.StatusNotFound, "Not found", "The console has no page at "+r.URL.Path+".")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	ctx := r.Context()
	id := r.PathValue("id")
	body := map[string]string{}
	if reason := strings.TrimSpace(r.PostForm.Get("reason")); reason != "" {
		body["reason"] = reason
	}
	// The answer names the workflow, for the log (a 202 does not).
	var done struct {
		WorkflowName string `json:"workflow_name"`
	}
	if err := c.apiFor(r).call(ctx, http.MethodPost, "/api/harvest/executions/"+url.PathEscape(id)+"/"+action, nil, body, &done); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	logattr.With(c.cfg.Logger, id, done.WorkflowName, "").Info("console: execution " + action)
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(id)+"?done="+action, http.StatusSeeOther)
}
