package console

import (
	"net/http"
	"net/url"
	"strings"

	"github.com/harvest-engine/harvest/api"
)

// internalWorkflows are the workflows Harvest's own tools register on
// the dev worker (examples.WorkflowBenchEcho, which harvest bench runs):
// the console lists one only once it has executions.
var internalWorkflows = map[string]bool{"bench_echo": true}

// listed are the workflows the console shows: all the API lists but the
// internal ones that never ran.
func listed(all []api.WorkflowSummary) []api.WorkflowSummary {
	out := make([]api.WorkflowSummary, 0, len(all))
	for _, wf := range all {
		if internalWorkflows[wf.Name] && !ran(wf) {
			continue
		}
		out = append(out, wf)
	}
	return out
}

// ran says whether a workflow has executions, of any status.
func ran(wf api.WorkflowSummary) bool {
	for _, n := range wf.Counts {
		if n > 0 {
			return true
		}
	}
	return false
}

type workflowsData struct {
	Workflows []api.WorkflowSummary
	Statuses  []string
	Done      string
	// Versions are, for each workflow with open executions, which code
	// they run: by build and by the version recorded of each change.
	Versions []api.WorkflowVersionsResponse
}

func (c *Console) handleWorkflows(w http.ResponseWriter, r *http.Request) {
	ctx := r.Context()
	var list api.ListWorkflowsResponse
	if err := c.apiFor(r).call(ctx, http.MethodGet, "/api/harvest/workflows", nil, nil, &list); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	data := workflowsData{Workflows: listed(list.Workflows), Statuses: statuses}
	// Only a workflow with running executions has code to tell of: the
	// others would cost a read of every store to say nothing.
	for _, wf := range data.Workflows {
		if wf.Counts[api.StatusRunning] == 0 {
			continue
		}
		var v api.WorkflowVersionsResponse
		path := "/api/harvest/workflows/" + url.PathEscape(wf.Name) + "/versions"
		if err := c.apiFor(r).call(ctx, http.MethodGet, path, nil, nil, &v); err != nil {
			c.apiProblem(w, r, err)
			return
		}
		// They may have closed since the list counted them.
		if v.Open > 0 {
			data.Versions = append(data.Versions, v)
		}
	}
	if name := r.URL.Query().Get("done"); name != "" {
		data.Done = "The admission gate of " + name + " changed."
	}
	c.render(w, r, http.StatusOK, "workflows", "Workflows", data)
}

// handleAdmission opens or closes a workflow's admission gate through the
// API (the admin scope).
func (c *Console) handleAdmission(w http.ResponseWriter, r *http.Request) {
	if err := r.ParseForm(); err != nil {
		c.problem(w, r, http.StatusBadRequest, "Bad form", "The form could not be read.")
		return
	}
	ctx := r.Context()
	name := r.PathValue("name")
	path := "/api/harvest/admission/" + url.PathEscape(name)
	var body any
	switch r.PostForm.Get("state") {
	case "open":
		path += "/open"
	case "closed":
		path += "/close"
		body = api.CloseAdmissionRequest{Reason: strings.TrimSpace(r.PostForm.Get("reason"))}
	default:
		c.problem(w, r, http.StatusBadRequest, "Bad form", "state must be open or closed.")
		return
	}
	if err := c.apiFor(r).call(ctx, http.MethodPost, path, nil, body, nil); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.cfg.Logger.Info("console: admission "+r.PostForm.Get("state"), "workflow", name)
	http.Redirect(w, r, "/ui/workflows?done="+url.QueryEscape(name), http.StatusSeeOther)
}

// handleWebhooks shows the webhook sources and bindings with this ingest
// process's counts, saying so.
func (c *Console) handleWebhooks(w http.ResponseWriter, r *http.Request) {
	showAnswer[api.ListWebhooksResponse](c, w, r, "/api/harvest/webhooks", "webhooks", "Webhooks and bindings")
}
