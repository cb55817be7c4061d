package ingest

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// The replay check's answers (harvest.WorkerConfig.ReplayCheck): a
// starting worker, which speaks only NATS, asks for a sample of a
// workflow's running executions and for each one's history, to replay
// them on its code before it takes the workflow's tasks. Ingest reads
// them from PostgreSQL, as the list and history routes do, and answers
// on core NATS in a queue group, so that one ingest process answers each
// request. An ingest without a database does not subscribe: a worker
// that no ingest answers skips its check.

// replyHeadroom is what a reply's headers may take beside its body
// within the server's max payload.
const replyHeadroom = 1024

// startReplayCheck subscribes to the replay check's requests; nothing
// without a database.
func (s *Server) startReplayCheck() error {
	if !s.hasDB() {
		return nil
	}
	for subject, handle := range map[string]nats.MsgHandler{
		broker.ReplaySampleSubject:  s.answerReplaySample,
		broker.ReplayHistorySubject: s.answerReplayHistory,
	} {
		sub, err := s.cfg.NC.QueueSubscribe(subject, broker.ReplayCheckQueue, handle)
		if err != nil {
			s.stopReplayCheck()
			return fmt.Errorf("subscribe to %s: %w", subject, err)
		}
		s.replaySubs = append(s.replaySubs, sub)
	}
	return nil
}

// stopReplayCheck ends the subscriptions to the replay check's requests.
func (s *Server) stopReplayCheck() {
	for _, sub := range s.replaySubs {
		_ = sub.Unsubscribe()
	}
	s.replaySubs = nil
}

// answerReplaySample answers a wire.ReplaySampleRequest: the newest
// running executions of the workflow on the task queue, as the list
// route reads them (the same executions `harvest workflow histories
// export --status Running` writes first).
func (s *Server) answerReplaySample(m *nats.Msg) {
	var req wire.ReplaySampleRequest
	switch err := json.Unmarshal(m.Data, &req); {
	case err != nil:
		s.replyReplay(m, wire.ReplaySampleReply{Error: "not a replay sample request: " + err.Error()})
		return
	case dedup.ValidateName(req.Workflow) != nil || dedup.ValidateName(req.TaskQueue) != nil:
		s.replyReplay(m, wire.ReplaySampleReply{Error: "replay sample request: the workflow and the task queue must be names"})
		return
	case req.Limit < 1 || req.Limit > wire.MaxReplaySample:
		s.replyReplay(m, wire.ReplaySampleReply{Error: fmt.Sprintf("replay sample request: limit %d: want 1 to %d", req.Limit, wire.MaxReplaySample)})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DBReadTimeout)
	defer cancel()
	execs, err := s.listExecutions(ctx, store.ListFilter{WorkflowName: req.Workflow, TaskQueue: req.TaskQueue, Status: wire.StatusRunning, Limit: req.Limit})
	if err != nil {
		s.log.Warn("replay check: list running executions", "workflow", req.Workflow, "err", err)
		s.replyReplay(m, wire.ReplaySampleReply{Error: "list running executions: " + err.Error()})
		return
	}
	ids := make([]string, 0, len(execs))
	for _, e := range execs {
		ids = append(ids, e.ExecutionID)
	}
	s.replyReplay(m, wire.ReplaySampleReply{ExecutionIDs: ids})
}

// answerReplayHistory answers a wire.ReplayHistoryRequest: the
// execution's history, its events as stored; an answer larger than the
// NATS server carries is answered TooLarge instead.
func (s *Server) answerReplayHistory(m *nats.Msg) {
	var req wire.ReplayHistoryRequest
	if err := json.Unmarshal(m.Data, &req); err != nil {
		s.replyReplay(m, wire.ReplayHistoryReply{Error: "not a replay history request: " + err.Error()})
		return
	}
	id, err := canonicalExecutionID(req.ExecutionID)
	if err != nil {
		s.replyReplay(m, wire.ReplayHistoryReply{Error: err.Error()})
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.cfg.DBReadTimeout)
	defer cancel()
	db := s.poolOf(id)
	e, err := store.GetExecution(ctx, db, id)
	if err != nil {
		s.replyReplay(m, wire.ReplayHistoryReply{Error: err.Error()})
		return
	}
	events, err := store.GetHistory(ctx, db, id)
	if err != nil {
		s.replyReplay(m, wire.ReplayHistoryReply{Error: err.Error()})
		return
	}
	data, err := json.Marshal(wire.ReplayHistoryReply{History: &wire.ReplayHistory{ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName,
		WorkflowID: e.WorkflowID, TaskQueue: e.TaskQueue, Status: e.Status, Events: events}})
	if err != nil {
		s.replyReplay(m, wire.ReplayHistoryReply{Error: "encode the history: " + err.Error()})
		return
	}
	limit := s.cfg.NC.MaxPayload()
	if limit > 0 && int64(len(data)+replyHeadroom) > limit {
		s.replyTooLarge(m, id, len(data), limit)
		return
	}
	if err := m.Respond(data); err != nil {
		if errors.Is(err, nats.ErrMaxPayload) {
			s.replyTooLarge(m, id, len(data), limit)
			return
		}
		s.log.Warn("replay check: answer", "execution_id", id, "err", err)
	}
}

// replyTooLarge answers that the history of execution id, size bytes
// with its reply, is more than the NATS server carries.
func (s *Server) replyTooLarge(m *nats.Msg, id string, size int, limit int64) {
	s.log.Warn("replay check: a history is larger than a NATS message; the worker skips it", "execution_id", id, "bytes", size, "max_payload", limit)
	s.replyReplay(m, wire.ReplayHistoryReply{TooLarge: true,
		Error: fmt.Sprintf("the history of %s is %d bytes, more than the NATS server's max payload of %d", id, size, limit)})
}

// replyReplay answers m with reply as JSON.
func (s *Server) replyReplay(m *nats.Msg, reply any) {
	data, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.log.Warn("replay check: answer", "subject", m.Subject, "err", err)
	}
}
