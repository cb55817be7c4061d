// Package historypage answers workers' requests for pages of an
// execution's history (wire.HistoryPageRequest on
// broker.HistoryPageSubject), from PostgreSQL. A workflow task carries
// only the execution's latest events; a worker that does not hold the
// execution in its cache asks for the rest. Ingest serves every store,
// each scheduler its own, all in one queue group.
package historypage

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

// readTimeout bounds one page's read.
const readTimeout = 10 * time.Second

// replyHeadroom is what a reply's envelope and headers may take beside
// its events within the server's max payload.
const replyHeadroom = 4096

// Server answers the history pages of some stores.
type Server struct {
	nc   *nats.Conn
	log  *slog.Logger
	subs []*nats.Subscription
}

// Serve subscribes to the history pages of each store pools holds (by
// store index), answering from its pool. Stop ends it.
func Serve(nc *nats.Conn, pools map[int]*pgxpool.Pool, log *slog.Logger) (*Server, error) {
	s := &Server{nc: nc, log: log}
	for i, pool := range pools {
		sub, err := nc.QueueSubscribe(broker.HistoryPageSubject(i), broker.HistoryPageQueue, func(m *nats.Msg) { s.answer(m, pool) })
		if err != nil {
			s.Stop()
			return nil, fmt.Errorf("subscribe to %s: %w", broker.HistoryPageSubject(i), err)
		}
		s.subs = append(s.subs, sub)
	}
	return s, nil
}

// Stop ends the subscriptions. Safe on nil and twice.
func (s *Server) Stop() {
	if s == nil {
		return
	}
	for _, sub := range s.subs {
		_ = sub.Unsubscribe()
	}
	s.subs = nil
}

// answer answers one request.
func (s *Server) answer(m *nats.Msg, pool *pgxpool.Pool) {
	var req wire.HistoryPageRequest
	reply := s.page(m.Data, &req, pool)
	data, err := json.Marshal(reply)
	if err == nil {
		err = m.Respond(data)
	}
	if err != nil {
		s.log.Warn("answer a history page request", "execution_id", req.ExecutionID, "err", err)
	}
}

// page reads the page a request asks for.
func (s *Server) page(data []byte, req *wire.HistoryPageRequest, pool *pgxpool.Pool) wire.HistoryPageReply {
	if err := json.Unmarshal(data, req); err != nil {
		return wire.HistoryPageReply{Error: "a history page request that does not parse: " + err.Error()}
	}
	// A seq is a PostgreSQL integer: a bound past it is refused here, as
	// a request that makes no sense, rather than by the driver as a
	// failed read.
	if u, err := uuid.Parse(req.ExecutionID); err != nil || u.String() != req.ExecutionID || req.From < 1 || req.To < req.From || req.To > math.MaxInt32 {
		return wire.HistoryPageReply{Error: fmt.Sprintf("a history page request for %q, events %d to %d: want an execution id and 1 <= from <= to <= %d",
			req.ExecutionID, req.From, req.To, math.MaxInt32)}
	}
	limit := s.nc.MaxPayload() - replyHeadroom
	maxBytes := req.MaxBytes
	if maxBytes <= 0 || int64(maxBytes) > limit/2 {
		// JSON may escape attributes' bytes: half the payload leaves room.
		maxBytes = int(limit / 2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), readTimeout)
	defer cancel()
	events, more, err := store.HistoryPage(ctx, pool, req.ExecutionID, req.From, req.To, maxBytes)
	switch {
	case errors.Is(err, store.ErrExecutionNotFound):
		return wire.HistoryPageReply{NotFound: true}
	case err != nil:
		s.log.Warn("read a history page", "execution_id", req.ExecutionID, "err", err)
		return wire.HistoryPageReply{Error: "could not read the history: " + err.Error()}
	}
	return wire.HistoryPageReply{Events: events, More: more}
}
