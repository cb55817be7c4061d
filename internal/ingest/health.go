package ingest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/store"
)

// handleHealth answers 200 while the process serves.
func handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, client.HealthResponse{Status: "ok"})
}

// handleReady answers 200 when ingest can accept commands, answer from
// PostgreSQL and every shard applies commands: 503 when JetStream is
// unreachable, when PostgreSQL cannot be read (with a database
// configured: the read routes, keyed replays and late outcomes need it),
// or when a shard's applies have kept failing for longer than
// ShardFailingAfter. The reasons name what fails; NATS's and PostgreSQL's
// own errors go to the log.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), 2*time.Second)
	defer cancel()
	body := client.ReadinessResponse{Status: "ready", JetStream: "ok", Database: "none"}
	if _, err := s.cfg.Topology.JS.AccountInfo(ctx); err != nil {
		s.log.Warn("readiness: JetStream unreachable", "err", err)
		body.JetStream = "unreachable"
		body.Reasons = append(body.Reasons, "JetStream unreachable")
	}
	if s.hasDB() {
		per, err := eachStore(ctx, s, func(ctx context.Context, _ int, db *pgxpool.Pool) ([]store.ShardFailure, error) {
			return store.FailingShards(ctx, db, s.cfg.ShardFailingAfter)
		})
		var failing []store.ShardFailure
		for _, f := range per {
			failing = append(failing, f...)
		}
		if err != nil {
			s.log.Warn("readiness: PostgreSQL unreachable", "err", err)
			body.Database = "unavailable"
			body.Reasons = append(body.Reasons, "PostgreSQL unreachable")
		} else {
			body.Database = "ok"
		}
		// The shards' last errors are PostgreSQL's or NATS's own: they are
		// in the scheduler's log, its admin /readyz and
		// shard_offsets.last_error, not in this public answer.
		for _, f := range failing {
			body.FailingShards = append(body.FailingShards, client.FailingShard{Shard: f.Shard, FailingSince: f.FailingSince})
		}
		if len(failing) > 0 {
			f := failing[0]
			body.Reasons = append(body.Reasons, fmt.Sprintf("%d shard(s) cannot apply commands; shard %d since %s (the scheduler's log says why)",
				len(failing), f.Shard, f.FailingSince.Format(time.RFC3339)))
		}
	}
	status := http.StatusOK
	if len(body.Reasons) > 0 {
		status = http.StatusServiceUnavailable
		body.Status, body.Error, body.Message = "not_ready", client.CodeNotReady, strings.Join(body.Reasons, "; ")
	}
	writeJSON(w, status, body)
}
