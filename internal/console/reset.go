package console

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/wire"
)

// An execution's Reset… (docs/reset.md) is a form, a plan and a
// confirmation: the form (GET …/reset) names the point; submitted, it
// comes back as the same page with ?plan=1, which shows the API's dry
// run of that point; only the plan's Confirm posts (POST …/reset), to
// the point the plan showed, by its seq. A refusal of the API (the
// point, or the reset itself) is shown on the form, and nothing changes.

// The points the form offers, as its "to" carries them.
const (
	resetFirstTask = "first_task"
	resetLastTask  = "last_task"
	resetActivity  = "activity"
	resetSeq       = "seq"
)

// occurrence is an occurrence of an activity a reset can go to, and how
// the form names it.
type occurrence struct{ Value, Label string }

// occurrences are the form's occurrences, the API's default first.
var occurrences = []occurrence{
	{"last", "its last occurrence"},
	{"first", "its first occurrence"},
	{"last_failed", "its last failed occurrence"},
}

// resetForm is the form's values, as its URL or its posted body carries
// them.
type resetForm struct {
	// To is first_task, last_task, activity or seq.
	To                   string
	Activity, Occurrence string
	Seq                  string
	Reason               string
	Reapply              bool
}

// resetFormOf reads the form from v; submitted says it was sent by the
// form itself, whose unchecked box sends nothing.
func resetFormOf(v url.Values, submitted bool) resetForm {
	get := func(name string) string { return strings.TrimSpace(v.Get(name)) }
	f := resetForm{To: get("to"), Activity: get("activity"), Occurrence: get("occurrence"), Seq: get("seq"), Reason: get("reason"), Reapply: true}
	switch r := get("reapply_signals"); {
	case r != "":
		f.Reapply = r == "true"
	case submitted:
		f.Reapply = false
	}
	if f.Occurrence == "" {
		f.Occurrence = "last"
	}
	return f
}

// target is the form's point as a reset's "to", or what the form lacks.
func (f resetForm) target() (json.RawMessage, string) {
	var v any
	switch f.To {
	case resetFirstTask, resetLastTask:
		v = f.To
	case resetActivity:
		if f.Activity == "" {
			return nil, "Choose the activity whose workflow task to reset to."
		}
		v = api.ResetPoint{Activity: f.Activity, Occurrence: f.Occurrence}
	case resetSeq:
		n, err := strconv.Atoi(f.Seq)
		if err != nil || n < 1 {
			return nil, "Give the seq of a WorkflowTaskCompleted event of the history: one of the valid points."
		}
		v = api.ResetPoint{Seq: &n}
	default:
		return nil, "Choose the point to reset to."
	}
	raw, err := json.Marshal(v)
	if err != nil {
		return nil, err.Error()
	}
	return raw, ""
}

// request is the form as a reset's body, with to its point.
func (f resetForm) request(to json.RawMessage) api.ResetRequest {
	reapply := f.Reapply
	return api.ResetRequest{To: to, ReapplySignals: &reapply, Reason: f.Reason}
}

// query is the form as its page's URL query.
func (f resetForm) query() url.Values {
	q := url.Values{"to": {f.To}, "reapply_signals": {strconv.FormatBool(f.Reapply)}}
	switch f.To {
	case resetActivity:
		q.Set("activity", f.Activity)
		q.Set("occurrence", f.Occurrence)
	case resetSeq:
		q.Set("seq", f.Seq)
	}
	if f.Reason != "" {
		q.Set("reason", f.Reason)
	}
	return q
}

// resetPoint is a point a reset can go to: a WorkflowTaskCompleted's seq
// and its task's number.
type resetPoint struct {
	Seq, TaskID int
	// Plan is the URL of the plan of a reset to it.
	Plan string
}

// resetRefusal is the API's refusal of a point or of a reset, or what
// the form lacks (Status 400 and no Code).
type resetRefusal struct {
	Status  int
	Code    string
	Message string
	// Nearest are the valid points nearest to the one refused.
	Nearest []resetPoint
}

type resetData struct {
	E    api.Execution
	Form resetForm
	// Activities are the names of the activities of its history, in the
	// order each was first scheduled.
	Activities  []string
	Occurrences []occurrence
	// Points are every point a reset can go to; NoPoints, when there is
	// none, says why.
	Points   []resetPoint
	NoPoints string
	// Plan is the dry run of the form's point, with the URLs that confirm
	// it (the form's action) and that go back to the form.
	Plan    *api.ResetPlan
	Back    string
	Refusal *resetRefusal
	// tasks are the task numbers of the history's WorkflowTaskCompleted
	// events, by seq.
	tasks map[int]int
}

// base is the URL of the execution's Reset… page.
func (d *resetData) base() string {
	return "/ui/executions/" + url.PathEscape(d.E.ExecutionID) + "/reset"
}

// planURL is the URL of the plan of the form f.
func (d *resetData) planURL(f resetForm) string {
	q := f.query()
	q.Set("plan", "1")
	return d.base() + "?" + q.Encode()
}

// point is seq as a point, with its task's number and its plan's URL.
func (d *resetData) point(seq int) resetPoint {
	f := d.Form
	f.To, f.Seq = resetSeq, strconv.Itoa(seq)
	return resetPoint{Seq: seq, TaskID: d.tasks[seq], Plan: d.planURL(f)}
}

// refused turns an API answer that refuses the point or the reset into
// what the form shows; ok is false for any other error.
func (d *resetData) refused(err error) bool {
	var apiErr *apiError
	if !errors.As(err, &apiErr) {
		return false
	}
	switch apiErr.status {
	case http.StatusBadRequest, http.StatusConflict, http.StatusUnprocessableEntity:
	default:
		return false
	}
	d.Refusal = &resetRefusal{Status: apiErr.status, Code: apiErr.body.Error, Message: apiErr.body.Message}
	for _, seq := range apiErr.body.NearestPoints {
		d.Refusal.Nearest = append(d.Refusal.Nearest, d.point(seq))
	}
	return true
}

// resetPage reads what the Reset… page of execution id shows: the
// execution, its activities' names and its tasks.
func (c *Console) resetPage(ctx context.Context, a apiCaller, id string, f resetForm) (*resetData, error) {
	d := &resetData{Form: f, Occurrences: occurrences, tasks: map[int]int{}}
	path := "/api/harvest/executions/" + url.PathEscape(id)
	if err := a.call(ctx, http.MethodGet, path, nil, nil, &d.E); err != nil {
		return nil, err
	}
	var hist api.HistoryResponse
	if err := a.call(ctx, http.MethodGet, path+"/history", nil, nil, &hist); err != nil {
		return nil, err
	}
	seen := map[string]bool{}
	for _, e := range hist.Events {
		switch e.Type {
		case wire.EventActivityScheduled:
			var at wire.ActivityScheduledAttrs
			if json.Unmarshal(e.Raw, &at) == nil && !seen[at.ActivityName] {
				seen[at.ActivityName] = true
				d.Activities = append(d.Activities, at.ActivityName)
			}
		case wire.EventWorkflowTaskCompleted:
			var at wire.WorkflowTaskCompletedAttrs
			if json.Unmarshal(e.Raw, &at) == nil {
				d.tasks[e.Seq] = at.TaskID
			}
		}
	}
	if d.Form.To == "" {
		d.Form.To = resetLastTask
	}
	d.Back = d.base() + "?" + d.Form.query().Encode()
	return d, nil
}

// validPoints fills d.Points from the API's dry runs: that of the last
// task lists them all; if the last task is no point, that of the
// valid point nearest to it does.
func (c *Console) validPoints(ctx context.Context, a apiCaller, d *resetData) error {
	path := "/api/harvest/executions/" + url.PathEscape(d.E.ExecutionID) + "/reset"
	dry := url.Values{"dry_run": {"true"}}
	var plan api.ResetPlan
	err := a.call(ctx, http.MethodPost, path, dry, api.ResetRequest{To: json.RawMessage(`"last_task"`)}, &plan)
	var apiErr *apiError
	if errors.As(err, &apiErr) && apiErr.status == http.StatusUnprocessableEntity {
		if len(apiErr.body.NearestPoints) == 0 {
			d.NoPoints = apiErr.body.Message
			return nil
		}
		to, _ := json.Marshal(api.ResetPoint{Seq: &apiErr.body.NearestPoints[0]})
		err = a.call(ctx, http.MethodPost, path, dry, api.ResetRequest{To: to}, &plan)
	}
	if err != nil {
		return err
	}
	for _, seq := range plan.ValidPoints {
		d.Points = append(d.Points, d.point(seq))
	}
	return nil
}

// handleResetForm is the execution's Reset… page: the form, and with
// ?plan=1 the dry run of the point it names, with its Confirm. Nothing
// changes until Confirm is posted.
func (c *Console) handleResetForm(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a := c.apiFor(r)
	q := r.URL.Query()
	planned := q.Get("plan") != ""
	d, err := c.resetPage(ctx, a, r.PathValue("id"), resetFormOf(q, planned))
	if err != nil {
		c.apiProblem(w, r, err)
		return
	}
	status := http.StatusOK
	if planned {
		to, lacks := d.Form.target()
		if lacks != "" {
			d.Refusal, status = &resetRefusal{Status: http.StatusBadRequest, Message: lacks}, http.StatusBadRequest
		} else {
			var plan api.ResetPlan
			err := a.call(ctx, http.MethodPost, "/api/harvest/executions/"+url.PathEscape(d.E.ExecutionID)+"/reset",
				url.Values{"dry_run": {"true"}}, d.Form.request(to), &plan)
			switch {
			case err == nil:
				d.Plan = &plan
				for _, seq := range plan.ValidPoints {
					d.Points = append(d.Points, d.point(seq))
				}
			case d.refused(err):
				status = d.Refusal.Status
			default:
				c.apiProblem(w, r, err)
				return
			}
		}
	}
	if d.Plan == nil {
		if err := c.validPoints(ctx, a, d); err != nil {
			c.apiProblem(w, r, err)
			return
		}
	}
	c.render(w, r, status, "reset", "Reset execution", d)
}

// handleReset posts the reset to the API, as the CLI does, and goes to
// the new run; a refusal is shown on the form.
func (c *Console) handleReset(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	ctx := r.Context()
	a := c.apiFor(r)
	id := r.PathValue("id")
	f := resetFormOf(r.PostForm, true)
	// The answer is the new run (201), or the command's id while its
	// outcome is not known yet (202).
	var done struct {
		api.ResetResponse
		CommandID string `json:"command_id"`
	}
	to, lacks := f.target()
	var err error
	if lacks == "" {
		err = a.call(ctx, http.MethodPost, "/api/harvest/executions/"+url.PathEscape(id)+"/reset", nil, f.request(to), &done)
	}
	if lacks != "" || err != nil {
		d, rerr := c.resetPage(ctx, a, id, f)
		if rerr != nil {
			c.apiProblem(w, r, rerr)
			return
		}
		switch {
		case lacks != "":
			d.Refusal = &resetRefusal{Status: http.StatusBadRequest, Message: lacks}
		case !d.refused(err):
			c.apiProblem(w, r, err)
			return
		}
		if err := c.validPoints(ctx, a, d); err != nil {
			c.apiProblem(w, r, err)
			return
		}
		c.render(w, r, d.Refusal.Status, "reset", "Reset execution", d)
		return
	}
	log := logattr.With(c.cfg.Logger, id, done.WorkflowName, done.CommandID)
	if done.ExecutionID == "" {
		log.Info("console: execution reset accepted, its outcome not known yet")
		http.Redirect(w, r, "/ui/executions/"+url.PathEscape(id)+"?done=reset-accepted", http.StatusSeeOther)
		return
	}
	log.Info("console: execution reset", "reset_to", done.ExecutionID, "point_seq", done.PointSeq, "deduplicated", done.Deduplicated)
	result := "reset"
	if done.Deduplicated {
		result = "reset-again"
	}
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(done.ExecutionID)+"?done="+result, http.StatusSeeOther)
}
