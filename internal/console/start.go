package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/logattr"
)

// The workflows page's Start… is a form (GET /ui/workflows/start, with
// ?workflow= naming the one chosen): the workflow, its input as JSON,
// and an optional workflow_id and idempotency key. Posted, it starts by
// POST /api/harvest/workflows/{name}/start, as the CLI does, and goes to
// the execution it started (or, for a key claimed before, to the one the
// key started); a refusal of the API, or an input that is not JSON, is
// shown on the form with what was typed.

// startForm is the Start… form's values.
type startForm struct {
	Workflow, Input, WorkflowID, Key string
}

// startFormOf reads the form from v.
func startFormOf(v url.Values) startForm {
	get := func(name string) string { return strings.TrimSpace(v.Get(name)) }
	return startForm{Workflow: get("workflow"), Input: get("input"), WorkflowID: get("workflow_id"), Key: get("idempotency_key")}
}

// request is the form as a start's body.
func (f startForm) request(input []byte) api.StartRequest {
	req := api.StartRequest{Input: input}
	if f.WorkflowID != "" {
		req.WorkflowID = &f.WorkflowID
	}
	if f.Key != "" {
		req.IdempotencyKey = &f.Key
	}
	return req
}

type startData struct {
	Form startForm
	// Workflows are those the form offers: those the workflows page
	// lists.
	Workflows []string
	// Schema is the chosen workflow's input schema, indented.
	Schema  string
	Refusal *formRefusal
	// Accepted is the command of a start accepted whose outcome is not
	// known yet (202).
	Accepted *api.AcceptedResponse
}

// startPage reads what the Start… page shows.
func (c *Console) startPage(r *http.Request, f startForm) (*startData, error) {
	var list api.ListWorkflowsResponse
	if err := c.apiFor(r).call(r.Context(), http.MethodGet, "/api/harvest/workflows", nil, nil, &list); err != nil {
		return nil, err
	}
	d := &startData{Form: f}
	for _, wf := range listed(list.Workflows) {
		d.Workflows = append(d.Workflows, wf.Name)
		if wf.Name == f.Workflow {
			d.Schema = pretty(wf.InputSchema)
		}
	}
	return d, nil
}

// handleStartForm is the Start… page.
func (c *Console) handleStartForm(w http.ResponseWriter, r *http.Request) {
	d, err := c.startPage(r, startFormOf(r.URL.Query()))
	if err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "start", "Start a workflow", d)
}

// handleStart starts the form's workflow and goes to its execution; a
// refusal is shown on the form.
func (c *Console) handleStart(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	f := startFormOf(r.PostForm)
	show := func(status int, ref *formRefusal, accepted *api.AcceptedResponse) {
		d, err := c.startPage(r, f)
		if err != nil {
			c.apiProblem(w, r, err)
			return
		}
		d.Refusal, d.Accepted = ref, accepted
		c.render(w, r, status, "start", "Start a workflow", d)
	}
	if f.Workflow == "" {
		show(http.StatusBadRequest, &formRefusal{Status: http.StatusBadRequest, Message: "Choose the workflow to start."}, nil)
		return
	}
	input, bad := jsonOf("The input", f.Input)
	if bad != "" {
		show(http.StatusBadRequest, &formRefusal{Status: http.StatusBadRequest, Message: bad}, nil)
		return
	}
	// The answer is the execution (201, or 200 for a key claimed before),
	// or the command while its outcome is not known yet (202).
	var done struct {
		api.StartResponse
		CommandID string `json:"command_id"`
	}
	path := "/api/harvest/workflows/" + url.PathEscape(f.Workflow) + "/start"
	if err := c.apiFor(r).call(r.Context(), http.MethodPost, path, nil, f.request(input), &done); err != nil {
		if ref, ok := refusalOf(err); ok {
			show(ref.Status, ref, nil)
			return
		}
		c.apiProblem(w, r, err)
		return
	}
	log := logattr.With(c.cfg.Logger, done.ExecutionID, f.Workflow, done.CommandID).With("idempotency_key", f.Key)
	if done.ExecutionID == "" {
		log.Info("console: start accepted, its outcome not known yet")
		show(http.StatusOK, nil, &api.AcceptedResponse{CommandID: done.CommandID, Status: done.Status})
		return
	}
	result := "started"
	if done.Deduplicated != nil && *done.Deduplicated {
		result = "started-again"
	}
	log.Info("console: workflow started", "result", result)
	http.Redirect(w, r, "/ui/executions/"+url.PathEscape(done.ExecutionID)+"?done="+result, http.StatusSeeOther)
}
