package ingest

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/registry"
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

// unservedActivities are those of names (activities an execution waits
// for) that no live worker registers on taskQueue.
func (s *Server) unservedActivities(ctx context.Context, names []string, taskQueue string) []string {
	var out []string
	for _, name := range names {
		if !s.servedAs(ctx, registry.KindActivity, name, taskQueue) {
			out = append(out, name)
		}
	}
	return out
}

// checkKnown refuses a start of a workflow that no live worker serves
// and the configuration does not declare.
func (s *Server) checkKnown(ctx context.Context, name string) *rejection {
	if s.declared[name] || s.served(ctx, name, wire.DefaultTaskQueue) {
		return nil
	}
	return reject(http.StatusNotFound, client.CodeUnknownWorkflow, "name", fmt.Sprintf(
		"no worker serves workflow %q and the configuration does not declare it; check the name, start a worker that registers it, "+
			"or declare it (workflows: {%s: {}}) to accept its starts while no worker runs", name, name))
}

// waitingForWorker says whether a running execution of name on
// taskQueue has no live worker to run it.
func (s *Server) waitingForWorker(ctx context.Context, status, name, taskQueue string) bool {
	return status == wire.StatusRunning && !s.served(ctx, name, taskQueue)
}
