package ingest

import (
	"cmp"
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// workerLookupTimeout bounds a look-up of a workflow in the workers
// bucket, made when the in-memory index does not have it.
const workerLookupTimeout = 2 * time.Second

// declaredWorkflows are the workflows the configuration names: the
// declared ones, and the targets of webhook routing rules.
func declaredWorkflows(cfg Config) map[string]bool {
	out := map[string]bool{}
	for _, name := range cfg.DeclaredWorkflows {
		out[name] = true
	}
	for _, e := range cfg.Webhooks {
		for _, r := range e.Rules {
			out[r.Workflow] = true
		}
	}
	return out
}

// served says whether a live worker serves the workflow name on
// taskQueue. A look-up that fails counts as served: the start goes on,
// as it would have before workers registered.
func (s *Server) served(ctx context.Context, name, taskQueue string) bool {
	return s.servedAs(ctx, registry.KindWorkflow, name, taskQueue)
}

// servedAs says whether a live worker registers name as kind on
// taskQueue; a look-up that fails counts as served (and is logged).
func (s *Server) servedAs(ctx context.Context, kind, name, taskQueue string) bool {
	ctx, cancel := context.WithTimeout(ctx, workerLookupTimeout)
	defer cancel()
	ok, err := s.workers.Serves(ctx, kind, name, taskQueue, time.Now())
	if err != nil {
		what := "workflow"
		if kind == registry.KindActivity {
			what = "activity"
		}
		s.log.Warn("look up the workers of a "+what+"; taking it as served", what, name, "err", err)
		return true
	}
	return ok
}

// unservedActivities are those of pending (activities an execution
// waits for) that no live worker registers on the task queue each goes
// to: its own, else the execution's, taskQueue.
func (s *Server) unservedActivities(ctx context.Context, pending []store.PendingActivity, taskQueue string) []api.WaitingFor {
	var out []api.WaitingFor
	for _, a := range pending {
		queue := cmp.Or(a.TaskQueue, taskQueue)
		if !s.servedAs(ctx, registry.KindActivity, a.Name, queue) {
			out = append(out, api.WaitingFor{Kind: api.WaitingForActivity, Name: a.Name, TaskQueue: queue})
		}
	}
	return out
}

// configuredQueue is the task queue a start of the workflow name goes to
// when it names none: the workflow's configured one, else the default.
func (s *Server) configuredQueue(name string) string {
	return cmp.Or(s.cfg.TaskQueues[name], wire.DefaultTaskQueue)
}

// startQueue is the task queue a start of the workflow name goes to: the
// request's task_queue (nil when it has none), else the configured one.
// A task_queue that is no task queue name is refused.
func (s *Server) startQueue(name string, requested *string) (string, *rejection) {
	if requested == nil {
		return s.configuredQueue(name), nil
	}
	if dedup.ValidateName(*requested) != nil {
		return "", reject(http.StatusBadRequest, api.CodeInvalidTaskQueue, "task_queue", fmt.Sprintf(
			"task_queue %q: want a task queue name, 1 to %d bytes of letters, digits, '_' and '-'", shownName(*requested), dedup.MaxNameBytes))
	}
	return *requested, nil
}

// checkKnown refuses a start of a workflow on taskQueue that no live
// worker serves there and the configuration does not declare there: a
// declared workflow is accepted on its configured task queue (the
// default one when it has none).
func (s *Server) checkKnown(ctx context.Context, name, taskQueue string) *rejection {
	configured := s.configuredQueue(name)
	if (s.declared[name] && taskQueue == configured) || s.served(ctx, name, taskQueue) {
		return nil
	}
	var msg string
	switch {
	case s.declared[name]:
		msg = fmt.Sprintf("no worker serves workflow %q on task queue %q, and the configuration declares it on task queue %q; "+
			"check the task queue, start a worker that registers it on %q, or start it on %q", name, taskQueue, configured, taskQueue, configured)
	case taskQueue != wire.DefaultTaskQueue:
		msg = fmt.Sprintf("no worker serves workflow %q on task queue %q and the configuration does not declare it; "+
			"check the name and the task queue, start a worker that registers it on %q, "+
			"or declare it (workflows: {%s: {task_queue: %s}}) to accept its starts while no worker runs", name, taskQueue, taskQueue, name, taskQueue)
	default:
		msg = fmt.Sprintf("no worker serves workflow %q on task queue %q and the configuration does not declare it; "+
			"check the name, start a worker that registers it, "+
			"or declare it (workflows: {%s: {}}) to accept its starts while no worker runs", name, taskQueue, name)
	}
	return reject(http.StatusNotFound, api.CodeUnknownWorkflow, "name", msg)
}

// waitingForWorker says whether a running execution of name on
// taskQueue has no live worker to run it.
func (s *Server) waitingForWorker(ctx context.Context, status, name, taskQueue string) bool {
	return status == wire.StatusRunning && !s.served(ctx, name, taskQueue)
}
