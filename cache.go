package harvest

import (
	"container/list"
	"errors"
	"log/slog"
	"sync"

	"github.com/harvest-engine/harvest/harvesttype"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// DefaultWorkflowCacheSize is how many executions a worker keeps in
// memory between their workflow tasks, by default (harvesttype holds it).
const DefaultWorkflowCacheSize = harvesttype.DefaultWorkflowCacheSize

// workflowCache keeps executions' workflow code parked between their
// workflow tasks, the least recently used leaving first, so that a task
// runs on from where the last one stopped instead of replaying the
// history. A task that does not continue what its execution consumed
// (it went to another worker meanwhile, or the last result was not
// taken) replays on a fresh execution.
type workflowCache struct {
	size int
	log  *slog.Logger

	mu     sync.Mutex
	byID   map[string]*list.Element // of *cached
	lru    *list.List
	closed bool
	// serves says whether the worker registers a workflow on a task
	// queue (Worker.servesWorkflow); nil for none.
	serves func(name, taskQueue string) bool
}

type cached struct {
	id string
	x  *execution
}

func newWorkflowCache(size int, log *slog.Logger) *workflowCache {
	return &workflowCache{size: size, log: log, byID: map[string]*list.Element{}, lru: list.New()}
}

// take removes and returns the execution id has in the cache, if any.
func (c *workflowCache) take(id string) *execution {
	c.mu.Lock()
	defer c.mu.Unlock()
	el, ok := c.byID[id]
	if !ok {
		return nil
	}
	delete(c.byID, id)
	c.lru.Remove(el)
	return el.Value.(*cached).x
}

// put keeps x, ending the least recently used executions beyond the
// cache's size (and x itself when the cache is off or closed); it
// returns how many it ended for room.
func (c *workflowCache) put(id string, x *execution) (evicted int) {
	var evict []*execution
	c.mu.Lock()
	if c.closed || c.size <= 0 {
		c.mu.Unlock()
		x.close()
		return 0
	}
	if el, ok := c.byID[id]; ok {
		// Another delivery of the task ran meanwhile: keep the newer.
		evict = append(evict, el.Value.(*cached).x)
		c.lru.Remove(el)
	}
	c.byID[id] = c.lru.PushFront(&cached{id: id, x: x})
	for c.lru.Len() > c.size {
		el := c.lru.Back()
		c.lru.Remove(el)
		old := el.Value.(*cached)
		delete(c.byID, old.id)
		evict = append(evict, old.x)
		evicted++
	}
	c.mu.Unlock()
	for _, x := range evict {
		x.close()
	}
	return evicted
}

// close ends every execution in the cache, and those put later.
func (c *workflowCache) close() {
	c.mu.Lock()
	c.closed = true
	var all []*execution
	for el := c.lru.Front(); el != nil; el = el.Next() {
		all = append(all, el.Value.(*cached).x)
	}
	c.lru.Init()
	clear(c.byID)
	c.mu.Unlock()
	for _, x := range all {
		x.close()
	}
}

// len is how many executions the cache holds.
func (c *workflowCache) len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.lru.Len()
}

// run runs task of workflow fn: on its execution in the cache when the
// task continues it, else on a fresh one replaying the history. The
// execution goes back in the cache unless it is over or failed.
func (c *workflowCache) run(fn workflowFunc, task *wire.WorkflowTask, opts map[string]ActivityOptions) (workerrt.WorkflowRun, error) {
	x := c.take(task.ExecutionID)
	if x != nil && !x.continues(task) {
		x.close()
		x = nil
	}
	var run workerrt.WorkflowRun
	var err error
	if x != nil {
		from := x.applied
		run.Decisions, err = x.runTask(task)
		run.Cached, run.Events = true, x.applied-from
		if errors.Is(err, errStale) {
			x.close()
			x = nil
		}
	}
	if x == nil && !task.Whole() {
		// The task carries the latest events only: a replay needs the
		// history before them, which the runtime fetches.
		return workerrt.WorkflowRun{}, workerrt.ErrHistoryNeeded
	}
	if x == nil {
		x = newExecution(fn, task, opts, c.log)
		x.serves = c.serves
		run.Decisions, err = x.runTask(task)
		run.Cached, run.Events = false, x.applied
		if errors.Is(err, errStale) {
			// Cannot happen on a fresh execution; say so plainly.
			err = errors.New("replay of a fresh execution found its history inconsistent")
		}
	}
	run.Rejections, run.Idle = x.updates.rejections, x.idle
	if err == nil {
		run.States = x.stateChanges()
		if !x.returned {
			run.Waiting = x.waitingChange()
		}
	}
	if err != nil || x.returned {
		x.close()
		return run, err
	}
	run.Evicted = c.put(task.ExecutionID, x)
	run.Kept = c.size > 0
	return run, nil
}
