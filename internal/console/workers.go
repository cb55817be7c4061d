package console

import (
	"net/http"
	"net/url"

	"github.com/harvest-engine/harvest/api"
)

// handleWorkers shows the live workers, as GET /api/harvest/workers
// lists them.
func (c *Console) handleWorkers(w http.ResponseWriter, r *http.Request) {
	showAnswer[api.ListWorkersResponse](c, w, r, "/api/harvest/workers", "workers", "Workers")
}

// showAnswer renders the page named page, titled title, with the API's
// answer to GET path, decoded as T, as it is; a failed call is the API's
// problem page.
func showAnswer[T any](c *Console, w http.ResponseWriter, r *http.Request, path, page, title string) {
	var answer T
	if err := c.apiFor(r).call(r.Context(), http.MethodGet, path, nil, nil, &answer); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, page, title, answer)
}

// handleTaskQueue shows a task queue's workflows and activities with
// their backlogs and workers, as GET /api/harvest/task-queues/{name}
// tells them.
func (c *Console) handleTaskQueue(w http.ResponseWriter, r *http.Request) {
	name := r.PathValue("name")
	var q api.TaskQueueResponse
	if err := c.apiFor(r).call(r.Context(), http.MethodGet, "/api/harvest/task-queues/"+url.PathEscape(name), nil, nil, &q); err != nil {
		c.apiProblem(w, r, err)
		return
	}
	c.render(w, r, http.StatusOK, "taskqueue", "Task queue "+name, taskQueueData{TaskQueueResponse: q, Kinds: []taskQueueKind{
		{Kind: "Workflow", ID: "workflows", Names: q.Workflows},
		{Kind: "Activity", ID: "activities", Names: q.Activities},
	}})
}

// taskQueueData is the task queue page's: the API's answer, and its names
// by kind.
type taskQueueData struct {
	api.TaskQueueResponse
	Kinds []taskQueueKind
}

type taskQueueKind struct {
	Kind, ID string
	Names    []api.NameBacklog
}
