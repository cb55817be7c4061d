package workerrt

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/logattr"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The replay check (harvesttype.WorkerConfig.ReplayCheck): before a
// worker registers a workflow and binds its consumer, it replays a sample
// of the workflow's running histories on its code. A workflow any of
// whose histories does not replay is refused: this worker neither
// registers it nor takes its tasks, so they keep going to the workers
// that do (the build before a bad deploy), instead of failing on this
// one. Histories live in PostgreSQL, which a worker does not reach: it
// asks ingest over core NATS (broker.ReplaySampleSubject,
// broker.ReplayHistorySubject, answered by internal/ingest/replaycheck.go).
// What cannot be checked (no ingest answers, a history larger than a NATS
// message, the check out of time) is skipped, and a workflow with nothing
// against it is taken: the check guards a deploy, it never stops one.

// replayRequestTimeout bounds one request of the replay check.
const replayRequestTimeout = 5 * time.Second

// Results of the replay check, the result label of
// harvest_worker_replay_check_total.
const (
	// checkPassed: a history replayed as it was recorded.
	checkPassed = "passed"
	// checkRefused: a history did not replay; the workflow is refused.
	checkRefused = "refused"
	// checkSkipped: a history, or a workflow's whole sample, was not
	// checked.
	checkSkipped = "skipped"
)

var checkResults = []string{checkPassed, checkRefused, checkSkipped}

// checkReplays runs the replay check on reg's workflows, when the
// configuration asks for it (cfg.ReplayCheck.Sample), within
// cfg.ReplayCheck.Timeout. It returns reg without the workflows it
// refused (nor their input schemas), and the refusals; it never fails.
func (rt *Runtime) checkReplays(ctx context.Context, reg Registration) (Registration, []registry.Refusal) {
	rt.refused = nil
	rc := rt.cfg.ReplayCheck
	if rc.Sample <= 0 || len(reg.Workflows) == 0 {
		return reg, nil
	}
	ctx, cancel := context.WithTimeout(ctx, rc.Timeout)
	defer cancel()
	c := &replayCheck{rt: rt, sample: rc.Sample, timeout: rc.Timeout}
	var refusals []registry.Refusal
	taken := make([]string, 0, len(reg.Workflows))
	for _, name := range slices.Sorted(slices.Values(reg.Workflows)) {
		for _, result := range checkResults {
			rt.metrics.replayCheck.WithLabelValues(name, result)
		}
		if r := c.workflow(ctx, name, reg.Replay[name]); r != nil {
			refusals = append(refusals, *r)
			continue
		}
		taken = append(taken, name)
	}
	if len(refusals) == 0 {
		return reg, nil
	}
	rt.refused = map[string]bool{}
	schemas := maps.Clone(reg.Schemas)
	for _, r := range refusals {
		rt.refused[r.Workflow] = true
		delete(schemas, r.Workflow)
	}
	reg.Workflows, reg.Schemas = taken, schemas
	return reg, refusals
}

// replayCheck is one run of the replay check.
type replayCheck struct {
	rt      *Runtime
	sample  int
	timeout time.Duration
	// noIngest is set once a request found no responder: the workflows
	// after it are skipped without asking again.
	noIngest bool
}

// workflow checks the workflow name with run, and returns its refusal,
// or nil when it is taken.
func (c *replayCheck) workflow(ctx context.Context, name string, run WorkflowFunc) *registry.Refusal {
	if run == nil {
		return nil
	}
	log := c.rt.log.With(logattr.Workflow, name)
	counter := c.rt.metrics.replayCheck
	if c.noIngest {
		counter.WithLabelValues(name, checkSkipped).Inc()
		return nil
	}
	if ctx.Err() != nil {
		counter.WithLabelValues(name, checkSkipped).Inc()
		log.Warn("replay check skipped: out of time; taking the workflow unchecked", "timeout", c.timeout)
		return nil
	}
	var sample wire.ReplaySampleReply
	err := c.request(ctx, broker.ReplaySampleSubject, wire.ReplaySampleRequest{Workflow: name, TaskQueue: c.rt.cfg.TaskQueue, Limit: c.sample}, &sample)
	if err == nil && sample.Error != "" {
		err = errors.New(sample.Error)
	}
	if err != nil {
		counter.WithLabelValues(name, checkSkipped).Inc()
		if errors.Is(err, nats.ErrNoResponders) {
			c.noIngest = true
			c.rt.log.Warn("replay check skipped: no ingest answers on "+broker.ReplaySampleSubject+"; taking the workflows unchecked", "err", err)
			return nil
		}
		log.Warn("replay check skipped: the running executions could not be listed; taking the workflow unchecked", "err", err)
		return nil
	}
	passed, skipped := 0, 0
	defer func() {
		counter.WithLabelValues(name, checkPassed).Add(float64(passed))
		counter.WithLabelValues(name, checkSkipped).Add(float64(skipped))
	}()
	for i, id := range sample.ExecutionIDs {
		if ctx.Err() != nil {
			skipped += len(sample.ExecutionIDs) - i
			log.Warn("replay check: out of time; the rest of the sample is skipped", "timeout", c.timeout, "skipped", len(sample.ExecutionIDs)-i)
			break
		}
		elog := log.With(logattr.ExecutionID, id)
		task, err := c.history(ctx, id)
		if err != nil {
			skipped++
			elog.Warn("replay check: a history is skipped", "err", err)
			continue
		}
		failed, err := replayOne(ctx, run, task)
		switch {
		case failed != nil:
			counter.WithLabelValues(name, checkRefused).Inc()
			f := failed.Failure
			elog.Error("replay check: this worker does not take the workflow: a running execution's history does not replay on its code; its tasks stay with the workers that take it",
				"reason", f.Reason, "event_seq", f.EventSeq, "history", clip(f.History), "code", clip(f.Code), "err", clip(f.Message))
			return &registry.Refusal{Workflow: name, Reason: f.Reason, ExecutionID: id, Message: clip(f.Message), EventSeq: f.EventSeq}
		case err != nil:
			skipped++
			elog.Warn("replay check: a history is skipped", "err", err)
		default:
			passed++
		}
	}
	log.Info("replay check passed", "replayed", passed, "skipped", skipped)
	return nil
}

// history fetches the history of execution id, as the workflow task a
// worker would run next over it.
func (c *replayCheck) history(ctx context.Context, id string) (*wire.WorkflowTask, error) {
	var reply wire.ReplayHistoryReply
	if err := c.request(ctx, broker.ReplayHistorySubject, wire.ReplayHistoryRequest{ExecutionID: id}, &reply); err != nil {
		return nil, err
	}
	h := reply.History
	switch {
	case reply.Error != "":
		return nil, errors.New(reply.Error)
	case h == nil || len(h.Events) == 0:
		return nil, errors.New("the answer holds no history")
	}
	return wire.ReplayTask(h.ExecutionID, h.WorkflowName, h.WorkflowID, h.TaskQueue, h.Events), nil
}

// request sends req on subject and decodes the answer into reply, within
// replayRequestTimeout.
func (c *replayCheck) request(ctx context.Context, subject string, req, reply any) error {
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	rctx, cancel := context.WithTimeout(ctx, replayRequestTimeout)
	defer cancel()
	m, err := c.rt.cfg.NATS.RequestWithContext(rctx, subject, data)
	if err != nil {
		return fmt.Errorf("ask %s: %w", subject, err)
	}
	if err := json.Unmarshal(m.Data, reply); err != nil {
		return fmt.Errorf("answer on %s: %w", subject, err)
	}
	return nil
}

// replayOne replays task with run. It returns the failure that keeps the
// task from completing on this code (a divergence, an unsupported
// version, a panic), or an error when the replay could not tell (the
// history could not be read, the check ran out of time; a replay still
// running then is left to end on its own).
func replayOne(ctx context.Context, run WorkflowFunc, task *wire.WorkflowTask) (*TaskFailureError, error) {
	done := make(chan error, 1)
	go func() {
		defer func() {
			if p := recover(); p != nil {
				err := fmt.Errorf("the replay panicked: %v", p)
				done <- &TaskFailureError{Err: err, Failure: wire.WorkflowTaskFailure{Reason: wire.TaskFailedPanic, Message: err.Error()}}
			}
		}()
		_, err := run(task)
		done <- err
	}()
	select {
	case err := <-done:
		var failed *TaskFailureError
		if errors.As(err, &failed) {
			return failed, nil
		}
		return nil, err
	case <-ctx.Done():
		return nil, fmt.Errorf("the replay did not end within the check's time: %w", ctx.Err())
	}
}
