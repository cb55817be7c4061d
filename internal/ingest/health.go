package ingest

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
)

// readyTimeout bounds what /readyz asks of JetStream and PostgreSQL.
const readyTimeout = 2 * time.Second

// handleHealth answers 200 while the process serves.
func handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
}

// handleReady answers whether this process can serve: 503 not_ready when
// it cannot accept commands (JetStream unreachable from it, or every slot
// of max_in_flight taken), else 200, with status "ready", or "degraded"
// when something every ingest shares is wrong: PostgreSQL cannot be read
// (the read routes, keyed replays and late outcomes answer 503 one by
// one; commands are still accepted), shards cannot apply commands (their
// commands wait in the stream), or a budget of the requests without a
// token (a webhook source's, the console's) is full. Taking ingest out of
// service for those would turn a partial outage into a total one, since
// every replica shares them. The reasons name what fails, saturated the
// full budgets; NATS's and PostgreSQL's own errors go to the log.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), readyTimeout)
	defer cancel()
	body := api.ReadinessResponse{Status: api.ReadyStatusReady, JetStream: "ok", Database: "none"}
	var degraded []string
	if _, err := s.cfg.Topology.JS.AccountInfo(ctx); err != nil {
		s.log.Warn("readiness: JetStream unreachable", "err", err)
		body.JetStream = "unreachable"
		body.Reasons = append(body.Reasons, "JetStream unreachable")
	}
	if s.hasDB() {
		failing, err := s.failingShards(ctx)
		if err != nil {
			s.log.Warn("readiness: PostgreSQL unreachable", "err", err)
			body.Database = "unavailable"
			degraded = append(degraded, "PostgreSQL unreachable")
		} else {
			body.Database = "ok"
		}
		// The shards' last errors are PostgreSQL's or NATS's own: they are
		// in the scheduler's log, its admin /readyz and
		// shard_offsets.last_error, not in this public answer.
		for _, f := range failing {
			body.FailingShards = append(body.FailingShards, api.FailingShard{Shard: f.Shard, FailingSince: f.FailingSince, Cause: f.Cause})
		}
		if len(failing) > 0 {
			f := failing[0]
			why := "the scheduler's log says why"
			if f.Cause == store.UnownedCause {
				why = "no scheduler holds it"
			}
			degraded = append(degraded, fmt.Sprintf("%d shard(s) cannot apply commands; shard %d since %s (%s)",
				len(failing), f.Shard, f.FailingSince.UTC().Format(time.RFC3339), why))
		}
	}
	// A full budget: past it requests are answered 503 at once. The API's
	// is this process's alone, and a balancer should send elsewhere; the
	// others are filled by whoever may call without a token, on every
	// replica alike.
	apiFull, others := s.saturation()
	if apiFull {
		b := s.budgets.api
		body.Saturated = append(body.Saturated, b.name)
		body.Reasons = append(body.Reasons, fmt.Sprintf("saturated: serving %d %s (%s)", cap(b.serving), b.what, b.setting))
	}
	for _, b := range others {
		body.Saturated = append(body.Saturated, b.name)
		degraded = append(degraded, fmt.Sprintf("saturated: %d %s at once (%s)", cap(b.serving), b.what, b.setting))
	}
	status := http.StatusOK
	switch {
	case len(body.Reasons) > 0:
		status = http.StatusServiceUnavailable
		body.Reasons = append(body.Reasons, degraded...)
		body.Status, body.Error, body.Message = api.ReadyStatusNotReady, api.CodeNotReady, strings.Join(body.Reasons, "; ")
	case len(degraded) > 0:
		body.Reasons = degraded
		body.Status, body.Message = api.ReadyStatusDegraded, strings.Join(degraded, "; ")
	}
	writeJSON(w, status, body)
}

// failingShards reads the shards that have not applied for longer than
// ShardFailingAfter, in every store.
func (s *Server) failingShards(ctx context.Context) ([]store.ShardFailure, error) {
	per, err := eachStore(ctx, s, func(ctx context.Context, _ int, db *pgxpool.Pool) ([]store.ShardFailure, error) {
		return store.FailingShards(ctx, db, s.cfg.ShardFailingAfter)
	})
	if err != nil {
		return nil, err
	}
	var out []store.ShardFailure
	for _, f := range per {
		out = append(out, f...)
	}
	return out, nil
}

// failingCollector reports harvest_ingest_failing_shards, what /readyz
// lists in failing_shards, read when Prometheus scrapes. A read that
// fails reports nothing (the series are absent rather than stale), and
// an ingest with no database none.
type failingCollector struct {
	s    *Server
	desc *prometheus.Desc
}

func newFailingCollector(s *Server) *failingCollector {
	return &failingCollector{s: s, desc: prometheus.NewDesc("harvest_ingest_failing_shards",
		"Shards that have not applied commands for 10 s or more, as PostgreSQL says (read at scrape time), by cause: failing (the scheduler holding the shard keeps failing to apply) or unowned (no scheduler holds it). The same as /readyz's failing_shards; every ingest reports the same.",
		[]string{"cause"}, nil)}
}

func (c *failingCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c *failingCollector) Collect(ch chan<- prometheus.Metric) {
	if !c.s.hasDB() {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), readyTimeout)
	defer cancel()
	failing, err := c.s.failingShards(ctx)
	if err != nil {
		c.s.log.Debug("metrics: cannot read the failing shards", "err", err)
		return
	}
	counts := map[string]int{store.FailingCause: 0, store.UnownedCause: 0}
	for _, f := range failing {
		counts[f.Cause]++
	}
	for cause, n := range counts {
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), cause)
	}
}
