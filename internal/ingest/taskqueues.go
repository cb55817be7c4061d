package ingest

import (
	"fmt"
	"net/http"
	"slices"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/wire"
)

// handleTaskQueue is GET /api/harvest/task-queues/{name}: each workflow
// and activity of a task queue with its backlog (the task stream's count
// of its tasks) and the live workers that registered it there, so that
// an execution that does not run can be told waiting for a worker (a
// backlog, no workers) from waiting its turn (a backlog, busy workers).
// A name is listed when it has tasks or a live worker registered it on
// the queue. A token limited to some workflows sees only those
// workflows; activities are listed whole.
func (s *Server) handleTaskQueue(w http.ResponseWriter, r *http.Request) {
	queue := r.PathValue("name")
	if dedup.ValidateName(queue) != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidTaskQueue, "name", fmt.Sprintf(
			"task queue %q: want a task queue name, 1 to %d bytes of letters, digits, '_' and '-'", shownName(queue), dedup.MaxNameBytes))
		return
	}
	backlog, err := s.cfg.Topology.TaskBacklog(r.Context(), queue)
	if err != nil {
		s.unavailable(w, r, "the task stream cannot be read now; try again", err)
		return
	}
	live, err := s.liveWorkers(r.Context())
	if err != nil {
		s.unavailable(w, r, "the workers bucket cannot be read now; try again", err)
		return
	}
	// byKind gathers each name's backlog and workers, by task kind.
	byKind := map[string]map[string]*api.NameBacklog{wire.TaskWorkflow: {}, wire.TaskActivity: {}}
	entry := func(kind, name string) *api.NameBacklog {
		e := byKind[kind][name]
		if e == nil {
			e = &api.NameBacklog{Name: name, Workers: []string{}}
			byKind[kind][name] = e
		}
		return e
	}
	for kind, names := range backlog.Named {
		if byKind[kind] == nil {
			continue
		}
		for name, n := range names {
			entry(kind, name).Backlog = int64(n)
		}
	}
	for _, lw := range live {
		if lw.TaskQueue != queue {
			continue
		}
		for _, name := range lw.Workflows {
			e := entry(wire.TaskWorkflow, name)
			e.Workers = append(e.Workers, lw.Worker)
		}
		for _, name := range lw.Activities {
			e := entry(wire.TaskActivity, name)
			e.Workers = append(e.Workers, lw.Worker)
		}
	}
	out := api.TaskQueueResponse{TaskQueue: queue, Workflows: []api.NameBacklog{}, Activities: []api.NameBacklog{},
		UnroutedBacklog: api.UnroutedBacklog{Workflow: int64(backlog.Unrouted[wire.TaskWorkflow]), Activity: int64(backlog.Unrouted[wire.TaskActivity])}}
	for name, e := range byKind[wire.TaskWorkflow] {
		if sees(r.Context(), name) {
			out.Workflows = append(out.Workflows, *e)
		}
	}
	for _, e := range byKind[wire.TaskActivity] {
		out.Activities = append(out.Activities, *e)
	}
	for _, list := range [][]api.NameBacklog{out.Workflows, out.Activities} {
		slices.SortFunc(list, func(a, b api.NameBacklog) int { return strings.Compare(a.Name, b.Name) })
		for i := range list {
			slices.Sort(list[i].Workers)
		}
	}
	writeJSON(w, http.StatusOK, out)
}
