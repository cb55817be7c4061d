package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/harvest-engine/harvest/api"
)

type schedulesData struct {
	Rows []api.Schedule
	// Next is the URL of the next page; First that of the first.
	Next, First string
	Paged       bool
	Done        string
}

// handleSchedules lists the schedules by id, a page at a time with the
// API's cursor, each with its latest fire.
func (c *Console) handleSchedules(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	a := c.apiFor(r)
	q := url.Values{"limit": {pageSize}}
	cur := r.URL.Query().Get("cursor")
	if cur != "" {
		q.Set("cursor", cur)
	}
	var list api.ScheduleList
	if err := a.call(ctx, http.MethodGet, "/api/harvest/schedules", q, nil, &list); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	data := schedulesData{Rows: list.Schedules, First: "/ui/schedules", Paged: cur != ""}
	if list.NextCursor != "" {
		data.Next = "/ui/schedules?" + url.Values{"cursor": {list.NextCursor}}.Encode()
	}
	if id := r.URL.Query().Get("deleted"); id != "" {
		data.Done = "Schedule " + id + " was deleted; the executions it started run on."
	}
	c.render(w, r, http.StatusOK, "schedules", "Schedules", data)
}

type scheduleData struct {
	S     api.Schedule
	Fires []api.ScheduleFire
	// Next is the URL of the ledger's next (older) page; First that of
	// its newest.
	Next, First string
	Paged       bool
	Done        string
}

// handleSchedule shows one schedule, as GET /api/harvest/schedules/{id}
// answers it, and a page of its ledger of fires, newest first.
func (c *Console) handleSchedule(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	id := r.PathValue("id")
	a := c.apiFor(r)
	path := "/api/harvest/schedules/" + url.PathEscape(id)
	var data scheduleData
	if err := a.call(ctx, http.MethodGet, path, nil, nil, &data.S); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	q := url.Values{"limit": {pageSize}}
	cur := r.URL.Query().Get("cursor")
	if cur != "" {
		q.Set("cursor", cur)
	}
	var fires api.ScheduleFireList
	if err := a.call(ctx, http.MethodGet, path+"/fires", q, nil, &fires); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	data.Fires = fires.Fires
	data.First, data.Paged = "/ui/schedules/"+url.PathEscape(id), cur != ""
	if fires.NextCursor != "" {
		data.Next = data.First + "?" + url.Values{"cursor": {fires.NextCursor}}.Encode()
	}
	if act, ok := scheduleActions[r.URL.Query().Get("done")]; ok {
		data.Done = act.Done
	}
	c.render(w, r, http.StatusOK, "schedule", "Schedule "+id, data)
}

// scheduleAction is one of the schedule page's actions: its verb, what
// it does, whether it takes a note, and what the page says once done.
type scheduleAction struct {
	Verb, Explain string
	Note, Danger  bool
	Done          string
}

// scheduleActions are what the schedule page offers, by the route's
// name; each is the API's route of that name (delete its DELETE).
var scheduleActions = map[string]scheduleAction{
	"pause": {Verb: "Pause", Note: true, Done: "The schedule was paused.",
		Explain: "Its times that pass are recorded in its ledger as paused and start nothing, until it is unpaused; the executions it started run on. The note, if any, says why on its page and in the API."},
	"unpause": {Verb: "Unpause", Note: true, Done: "The schedule was unpaused.",
		Explain: "It fires again from its next time; the times that passed while it was paused stay recorded as paused (a backfill fires them). Fires it buffered start. A note replaces the pause's."},
	"trigger": {Verb: "Trigger", Done: "The schedule was triggered: a fire now is in its ledger.",
		Explain: "It fires once now, paused or not, under its overlap policy: the fire is recorded in its ledger with trigger \"trigger\", and starts an execution unless the policy says otherwise."},
	"delete": {Verb: "Delete", Danger: true,
		Explain: "The schedule and its ledger of fires are deleted, and it fires no more; the executions it started run on. A schedule the configuration declares is declared again when Harvest next starts."},
}

type scheduleConfirmData struct {
	S      api.Schedule
	Action string
	scheduleAction
}

// handleScheduleConfirm is the confirmation page of a schedule's action:
// nothing changes until its form is posted.
func (c *Console) handleScheduleConfirm(w http.ResponseWriter, r *http.Request) {
	act, ok := scheduleActions[r.PathValue("action")]
	if !ok {
		c.problem(w, r, http.StatusNotFound, "Not found", "The console has no page at "+r.URL.Path+".")
		return
	}
	data := scheduleConfirmData{Action: r.PathValue("action"), scheduleAction: act}
	if err := c.apiFor(r).call(r.Context(), http.MethodGet, "/api/harvest/schedules/"+url.PathEscape(r.PathValue("id")), nil, nil, &data.S); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "scheduleconfirm", act.Verb+" schedule", data)
}

// handleScheduleAction calls the action's API route, as the CLI does,
// and goes back to the schedule (to the list, once deleted).
func (c *Console) handleScheduleAction(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	act, ok := scheduleActions[action]
	if !ok {
		c.problem(w, r, http.StatusNotFound, "Not found", "The console has no page at "+r.URL.Path+".")
		return
	}
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	id := r.PathValue("id")
	path := "/api/harvest/schedules/" + url.PathEscape(id)
	method := http.MethodPost
	var body any
	switch {
	case action == "delete":
		method = http.MethodDelete
	case act.Note:
		path += "/" + action
		if note := strings.TrimSpace(r.PostForm.Get("note")); note != "" {
			body = api.SchedulePauseRequest{Note: note}
		}
	default:
		path += "/" + action
	}
	if err := c.apiFor(r).call(r.Context(), method, path, nil, body, nil); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.cfg.Logger.Info("console: schedule "+action, "schedule_id", id)
	if action == "delete" {
		http.Redirect(w, r, "/ui/schedules?"+url.Values{"deleted": {id}}.Encode(), http.StatusSeeOther)
		return
	}
	http.Redirect(w, r, "/ui/schedules/"+url.PathEscape(id)+"?done="+action, http.StatusSeeOther)
}
