package broker

import (
	"context"
	"fmt"
	"strings"

	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Backlog is what the task stream holds of one task queue. The stream is
// a work queue: a task stays in it until a worker settles it, so each
// count is of tasks waiting for a worker or being run.
type Backlog struct {
	// Named counts the tasks routed by name (NameTaskSubject, and
	// PriorityTaskSubject, PinnedTaskSubject and StickyTaskSubject for its
	// name), by kind (wire.TaskWorkflow,
	// wire.TaskActivity), then name. Only names with tasks are in it.
	Named map[string]map[string]uint64
	// Unrouted counts, by kind, the tasks an older scheduler wrote to the
	// queue's subjects from before routing by name (TaskSubject), which
	// any worker of the queue takes. A kind without tasks is absent.
	Unrouted map[string]uint64
}

// TaskBacklog reads the task stream's count of messages on each subject
// of queue (validated by dedup.ValidateName, so that it is one subject
// token). A subject of another shape (a kind this version does not know)
// is left out.
func (t *Topology) TaskBacklog(ctx context.Context, queue string) (Backlog, error) {
	b := Backlog{Named: map[string]map[string]uint64{}, Unrouted: map[string]uint64{}}
	s, err := t.JS.Stream(ctx, TaskStream)
	if err != nil {
		return b, fmt.Errorf("look up stream %s: %w", TaskStream, err)
	}
	info, err := s.Info(ctx, jetstream.WithSubjectFilter(TaskQueueFilter(queue)))
	if err != nil {
		return b, fmt.Errorf("read the backlog of task queue %s: %w", queue, err)
	}
	prefix := strings.TrimSuffix(TaskQueueFilter(queue), ">")
	for subject, n := range info.State.Subjects {
		rest, ok := strings.CutPrefix(subject, prefix)
		if !ok || n == 0 {
			continue
		}
		kind, name, named := strings.Cut(rest, ".")
		if kind != wire.TaskWorkflow && kind != wire.TaskActivity {
			continue
		}
		switch {
		case !named:
			b.Unrouted[kind] += n
		case name != "":
			// A pinned or sticky workflow task counts for its workflow, a
			// task of another priority than the default for its name:
			// each is one more token (PinnedTaskSubject,
			// PriorityTaskSubject).
			name, extra, longer := strings.Cut(name, ".")
			if longer && kind == wire.TaskActivity && TaskPriority(subject) == wire.DefaultPriority || strings.Contains(extra, ".") {
				continue
			}
			if b.Named[kind] == nil {
				b.Named[kind] = map[string]uint64{}
			}
			b.Named[kind][name] += n
		}
	}
	return b, nil
}
