package console

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
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

// filter is the executions page's filter, as its URL carries it. Attrs
// are its search attribute filters as typed: NAME=VALUE or
// NAME.gte=VALUE (gt, gte, lt, lte), several separated by commas.
type filter struct {
	Workflow, Status, Key, WorkflowID, From, To, Attrs string
}

// filterOf reads the filter from the page's query; attr may be given
// more than once.
func filterOf(q url.Values) filter {
	get := func(name string) string { return strings.TrimSpace(q.Get(name)) }
	var attrs []string
	for _, v := range q["attr"] {
		if v = strings.TrimSpace(v); v != "" {
			attrs = append(attrs, v)
		}
	}
	return filter{Workflow: get("workflow"), Status: get("status"), Key: get("key"), WorkflowID: get("workflow_id"),
		From: get("from"), To: get("to"), Attrs: strings.Join(attrs, ", ")}
}

// query is the filter as the console's own URL query.
func (f filter) query() url.Values {
	q := url.Values{}
	for name, v := range map[string]string{"workflow": f.Workflow, "status": f.Status, "key": f.Key, "workflow_id": f.WorkflowID, "from": f.From, "to": f.To, "attr": f.Attrs} {
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

// attrParams are the filter's search attributes as the API's attr.*
// parameters: "customer_id=c_1, amount.gte=500" is attr.customer_id=c_1
// and attr.amount.gte=500. What the API makes of a name or a value is
// its to say (400 invalid_search_attribute); the console only checks the
// shape.
func attrParams(attrs string) (url.Values, string) {
	q := url.Values{}
	for part := range strings.SplitSeq(attrs, ",") {
		part = strings.TrimSpace(part)
		if part == "" {
			continue
		}
		name, value, ok := strings.Cut(part, "=")
		name, value = strings.TrimSpace(name), strings.TrimSpace(value)
		if !ok || name == "" {
			return nil, fmt.Sprintf("Search attributes: %q is not NAME=VALUE (or NAME.gte=VALUE, with gt, gte, lt or lte).", part)
		}
		q.Add("attr."+name, value)
	}
	return q, ""
}

// apiQuery is the filter as GET /api/harvest/executions' parameters.
func (f filter) apiQuery() (url.Values, string) {
	q, bad := attrParams(f.Attrs)
	if bad != "" {
		return nil, bad
	}
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
	// Workflows are the names the workflow filter offers: those the API
	// knows (GET /api/harvest/workflows), internal ones only once they
	// ran; none when the token may not list them.
	Workflows []string
	// FromHint and ToHint are the start-time filter's placeholders: the
	// start and end of today (UTC).
	FromHint, ToHint string
	Rows             []api.Execution
	// Problem is what the API refused in the filter.
	Problem string
	// Next is the URL of the next (older) page; First that of the newest.
	Next, First string
	Paged       bool
}

// datetimeLocal is the layout of the browser's datetime-local inputs,
// which the start-time filter takes.
const datetimeLocal = "2006-01-02T15:04"

// workflowNames are the names the workflow filter offers; none when the
// API does not list them to this user, which costs the page nothing
// else.
func (c *Console) workflowNames(r *http.Request) []string {
	var list api.ListWorkflowsResponse
	if err := c.apiFor(r).call(r.Context(), http.MethodGet, "/api/harvest/workflows", nil, nil, &list); err != nil {
		return nil
	}
	var names []string
	for _, wf := range listed(list.Workflows) {
		names = append(names, wf.Name)
	}
	return names
}

// pageSize is how many executions a page lists, as the API's limit
// parameter.
const pageSize = "50"

func (c *Console) handleExecutions(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	f := filterOf(r.URL.Query())
	today := c.cfg.Now().UTC().Truncate(24 * time.Hour)
	data := executionsData{Filter: f, Statuses: statuses, First: "/ui/executions", Paged: r.URL.Query().Get("cursor") != "",
		FromHint: today.Format(datetimeLocal), ToHint: today.Add(24*time.Hour - time.Minute).Format(datetimeLocal)}
	data.Workflows = c.workflowNames(r)
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
		if f := apiErr.body.Field; f != "" && !strings.Contains(data.Problem, f) {
			data.Problem += " (" + f + ")"
		}
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
	ID        int
	FireAt    *time.Time
	Fired     *time.Time
	Cancelled *time.Time
	Set       time.Time
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
	// Attributes are its search attributes, by name.
	Attributes []attribute
	// Waits is what it waits for, while it runs.
	Waits waits
	// Page is the page's own URL; Refreshing says it loads itself again
	// (while the execution is Running or Pending, unless ?refresh=off).
	Page       string
	Refreshing bool
	// Done is the outcome of an action just taken, to show once.
	Done string
}

// refresh is the URL the page loads again while its execution may still
// change: Running or Pending, and not turned off.
func (d *executionData) refresh() string {
	if !d.Refreshing {
		return ""
	}
	return d.Page
}

func (c *Console) handleExecution(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	a := c.apiFor(r)
	data := &executionData{}
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
	data.Attributes = attributesOf(data.E)
	data.Waits = data.waitsOf()
	data.Page = "/ui/executions/" + url.PathEscape(id)
	data.Refreshing = (data.E.Status == api.StatusRunning || data.E.Status == api.StatusPending) && r.URL.Query().Get("refresh") != "off"
	switch r.URL.Query().Get("done") {
	case "cancel":
		data.Done = "Cancellation requested."
	case "terminate":
		data.Done = "Termination requested."
	case "signal":
		data.Done = "Signal sent: it is in the history below."
	case "signal-again":
		data.Done = "This signal's key was delivered before: it was not delivered again."
	case "signal-accepted":
		data.Done = "The signal was accepted, and its outcome is not known yet: it shows in the history once it is applied."
	case "started":
		data.Done = "Started."
	case "started-again":
		data.Done = "Its idempotency key started this execution before: this is it, and nothing new started."
	case "reset":
		data.Done = "Reset: this is the new run, from event " + strconv.Itoa(data.E.ResetPoint) + " of the run it was reset from."
	case "reset-again":
		data.Done = "The same reset was applied before: this is the run it made."
	case "reset-accepted":
		data.Done = "The reset was accepted, and its outcome is not known yet: once it is applied, this page names the new run (reset to)."
	}
	c.render(w, r, http.StatusOK, "execution", "Execution "+id, data)
}

// fromHistory fills the activities, signals, timers and timeline from the
// execution's history.
func (d *executionData) fromHistory(events []api.Event) {
	acts := map[int]*activity{}
	timers := map[int]*timer{}
	for _, e := range events {
		d.Events = append(d.Events, eventOf(e))
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
		case wire.EventTimerFired, wire.EventTimerCancelled:
			var at wire.TimerAttrs
			if json.Unmarshal(e.Raw, &at) == nil && timers[at.TimerID] != nil {
				closed := e.At
				if e.Type == wire.EventTimerFired {
					timers[at.TimerID].Fired = &closed
				} else {
					timers[at.TimerID].Cancelled = &closed
				}
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
