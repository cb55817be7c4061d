package ingest

import (
	"context"
	"net/http"
	"slices"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/registry"
)

// workersReadTimeout bounds a read of the workers bucket by the workers
// and task-queue routes.
const workersReadTimeout = 10 * time.Second

// handleListWorkers is GET /api/harvest/workers: the live workers, read
// from the workers bucket itself (not the index, which may lag a worker
// that just started), by task queue, host and id. A token limited to
// some workflows sees every worker, with only those workflows.
func (s *Server) handleListWorkers(w http.ResponseWriter, r *http.Request) {
	live, err := s.liveWorkers(r.Context())
	if err != nil {
		s.unavailable(w, r, "the workers bucket cannot be read now; try again", err)
		return
	}
	out := api.ListWorkersResponse{Workers: make([]api.Worker, 0, len(live))}
	for _, lw := range live {
		out.Workers = append(out.Workers, workerView(r.Context(), lw))
	}
	writeJSON(w, http.StatusOK, out)
}

// liveWorkers reads the live workers from the workers bucket; none
// without the bucket.
func (s *Server) liveWorkers(ctx context.Context) ([]registry.Worker, error) {
	kv := s.cfg.Topology.Workers
	if kv == nil {
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, workersReadTimeout)
	defer cancel()
	return registry.Workers(ctx, kv, time.Now())
}

// workerView is how the API shows a live worker to the caller of ctx.
func workerView(ctx context.Context, lw registry.Worker) api.Worker {
	v := api.Worker{ID: lw.Worker, Host: lw.Host, PID: lw.PID, Build: lw.Build, BuildID: lw.BuildID, StartedAt: lw.StartedAt, TaskQueue: lw.TaskQueue,
		Workflows: visibleWorkflows(ctx, lw.Workflows), Activities: slices.Clone(lw.Activities), LastHeartbeatAt: lw.HeartbeatAt.UTC()}
	for _, r := range lw.ReplayRefused {
		if sees(ctx, r.Workflow) {
			v.ReplayRefused = append(v.ReplayRefused, api.ReplayRefusal{Workflow: r.Workflow, Reason: r.Reason, ExecutionID: r.ExecutionID,
				Message: r.Message, EventSeq: r.EventSeq})
		}
	}
	if l := lw.Load; l != nil {
		v.Slots = &api.WorkerSlots{
			Workflow: api.SlotUsage{Used: l.WorkflowSlotsUsed, Size: l.WorkflowSlots},
			Activity: api.SlotUsage{Used: l.ActivitySlotsUsed, Size: l.ActivitySlots},
		}
	}
	return v
}

// visibleWorkflows are those of names the caller of ctx may see, never
// nil.
func visibleWorkflows(ctx context.Context, names []string) []string {
	out := []string{}
	for _, name := range names {
		if sees(ctx, name) {
			out = append(out, name)
		}
	}
	return out
}
