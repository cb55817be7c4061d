package workerrt

import (
	"context"
	"crypto/sha256"
	"fmt"
	"sync"
	"time"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/registry"
)

// Routing among builds (docs/versioning.md#pinned-workflows).
//
// A pinned execution's workflow tasks go to its build's subject
// (broker.PinnedTaskSubject), which each worker consumes for every
// workflow it registers, one consumer per queue, workflow and build.
// Every other workflow task goes to the subject the builds share; there
// a worker takes tasks only while its build is the newest that registers
// the workflow on its queue (registry.Index.NewestBuild), so that
// auto-upgrading executions move to a new build as soon as its first
// worker registers, and come back to the older one if the new one goes.

// PinnedConsumerName is the durable consumer the workers of build that
// register the workflow name on taskQueue share for the tasks of
// executions pinned to it: harvest_pin_<build token>_<length of the
// queue>_<queue>_<name>, or a hash of the four when that is longer than
// JetStream allows.
func PinnedConsumerName(taskQueue, name, build string) string {
	token := broker.BuildToken(build)
	n := fmt.Sprintf("harvest_pin_%s_%d_%s_%s", token, len(taskQueue), taskQueue, name)
	if len(n) <= maxConsumerName {
		return n
	}
	sum := sha256.Sum256([]byte(taskQueue + "\x00" + name + "\x00" + build))
	return fmt.Sprintf("harvest_pin_%x", sum[:16])
}

// buildGate says whether a worker pulls a workflow's shared consumer:
// open while its build is the newest that registers the workflow.
type buildGate struct {
	mu   sync.Mutex
	open bool
	// changed is closed, and replaced, when open changes.
	changed chan struct{}
}

func newBuildGate() *buildGate {
	return &buildGate{open: true, changed: make(chan struct{})}
}

// set opens or closes g; it says whether that changed it.
func (g *buildGate) set(open bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.open == open {
		return false
	}
	g.open = open
	close(g.changed)
	g.changed = make(chan struct{})
	return true
}

// state is whether g is open, and the channel closed at its next change.
func (g *buildGate) state() (bool, <-chan struct{}) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.open, g.changed
}

// buildCheckInterval is how often a worker looks again at which build is
// the newest of its workflows, besides: a registration that ages out
// (its worker gone without removing it) changes that without a change to
// the bucket.
const buildCheckInterval = time.Second

// followBuilds keeps gates (by workflow) open while this worker's build
// is the newest that registers each workflow on its task queue, until
// ctx ends. Without the workers bucket (a deployment older than builds)
// every gate stays open.
func (rt *Runtime) followBuilds(ctx context.Context, gates map[string]*buildGate) {
	if rt.top.Workers == nil || len(gates) == 0 {
		return
	}
	names := make([]string, 0, len(gates))
	for name := range gates {
		names = append(names, name)
	}
	idx := registry.NewWorkflowIndex(rt.top.Workers, rt.log, names, rt.cfg.TaskQueue)
	for ctx.Err() == nil {
		if err := idx.Start(ctx); err == nil {
			break
		} else if ctx.Err() == nil {
			rt.log.Warn("follow the workers bucket to route by build; taking every task meanwhile", "err", err)
		}
		if !wait(ctx, buildCheckInterval) {
			return
		}
	}
	defer idx.Close()
	for name := range gates {
		rt.metrics.newestBuild.WithLabelValues(name).Inc() // open
	}
	defer func() {
		for name, g := range gates {
			if open, _ := g.state(); open {
				rt.metrics.newestBuild.WithLabelValues(name).Dec()
			}
		}
	}()
	for {
		now := time.Now()
		for name, g := range gates {
			newest := idx.NewestBuild(name, rt.cfg.TaskQueue, now)
			open := newest == "" || newest == rt.buildID
			if g.set(open) {
				if open {
					rt.metrics.newestBuild.WithLabelValues(name).Inc()
					rt.log.Info("this build is the newest of a workflow: taking its tasks", "workflow", name, "build_id", rt.buildID)
				} else {
					rt.metrics.newestBuild.WithLabelValues(name).Dec()
					rt.log.Info("a newer build registers a workflow: leaving its tasks to it, but for executions pinned to this build",
						"workflow", name, "build_id", rt.buildID, "newest_build_id", newest)
				}
			}
		}
		if !wait(ctx, buildCheckInterval) {
			return
		}
	}
}

// wait waits d; false when ctx ends first.
func wait(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
