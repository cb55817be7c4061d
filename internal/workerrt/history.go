package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/wire"
)

// A workflow task carries the execution's events since the last task
// (wire.WorkflowTask.HistoryFrom), not its whole history. A worker that
// holds the execution in its cache runs on from where it stopped; any
// other fetches the events before, page by page, from ingest or a
// scheduler (broker.HistoryPageSubject), then replays the whole history.

// ErrHistoryNeeded is what a WorkflowFunc returns for a task that carries
// only the latest events of an execution it does not hold: the runtime
// fetches the history before them and runs the task again, whole.
var ErrHistoryNeeded = errors.New("workflow task: the execution's earlier history is needed")

// errExecutionGone says that the execution of a task whose history is
// fetched no longer exists (its retention ran out): the task is moot.
var errExecutionGone = errors.New("the execution no longer exists")

// historyPageTimeout bounds one page's request.
const historyPageTimeout = 10 * time.Second

// fetchHistory makes task whole: it fetches the execution's events
// before the first one task carries and puts them in front.
func (rt *Runtime) fetchHistory(ctx context.Context, task *wire.WorkflowTask) error {
	name := rt.workflowLabel(task.WorkflowName)
	events, err := rt.historyBefore(ctx, task)
	if err != nil {
		rt.metrics.historyFetches.WithLabelValues(name, fetchFailed).Inc()
		return err
	}
	rt.metrics.historyFetches.WithLabelValues(name, fetchDone).Inc()
	rt.metrics.historyFetched.WithLabelValues(name).Add(float64(len(events)))
	task.History = append(events, task.History...)
	task.HistoryFrom = 0
	return nil
}

// historyBefore reads the events 1 to task.FirstSeq()-1 of task's
// execution, in pages.
func (rt *Runtime) historyBefore(ctx context.Context, task *wire.WorkflowTask) ([]wire.Event, error) {
	to := task.FirstSeq() - 1
	subject := broker.HistoryPageSubject(rt.top.Layout().StoreOfShard(task.Shard))
	events := make([]wire.Event, 0, to)
	for next := 1; next <= to; {
		data, err := json.Marshal(wire.HistoryPageRequest{ExecutionID: task.ExecutionID, From: next, To: to})
		if err != nil {
			return nil, fmt.Errorf("fetch history: %w", err)
		}
		rctx, cancel := context.WithTimeout(ctx, historyPageTimeout)
		m, err := rt.js.Conn().RequestWithContext(rctx, subject, data)
		cancel()
		if errors.Is(err, nats.ErrNoResponders) {
			return nil, fmt.Errorf("fetch history of events %d to %d: no ingest or scheduler answers on %s", next, to, subject)
		}
		if err != nil {
			return nil, fmt.Errorf("fetch history of events %d to %d: %w", next, to, err)
		}
		var reply wire.HistoryPageReply
		if err := json.Unmarshal(m.Data, &reply); err != nil {
			return nil, fmt.Errorf("fetch history: an answer that does not parse: %w", err)
		}
		switch {
		case reply.NotFound:
			return nil, errExecutionGone
		case reply.Error != "":
			return nil, fmt.Errorf("fetch history of events %d to %d: %s", next, to, reply.Error)
		case len(reply.Events) == 0:
			return nil, fmt.Errorf("fetch history of events %d to %d: the store has none of them", next, to)
		}
		for _, ev := range reply.Events {
			if next > to {
				break
			}
			if ev.Seq != next {
				return nil, fmt.Errorf("fetch history: event %d came where %d was due", ev.Seq, next)
			}
			events = append(events, ev)
			next++
		}
		if !reply.More && next <= to {
			return nil, fmt.Errorf("fetch history: the store's history ends at event %d, before %d", next-1, to)
		}
	}
	return events, nil
}
