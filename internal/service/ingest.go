package service

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/store"
)

// RunIngest serves the HTTP API and runs the NATS subject bindings until
// ctx ends. Its metrics are on the API's /metrics, and, with
// metrics_addr, on that address's /metrics too.
func RunIngest(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	// Before anything connects: an API that would be open to the network
	// refuses to start.
	authn, err := APIAuth(cfg, cfg.HTTPAddr, log)
	if err != nil {
		return err
	}
	nc, top, err := ConnectNATS(ctx, cfg, "harvest-ingest", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	tr, stopTracing, err := StartTracing(ctx, "harvest-ingest", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	top.Tracing = tr
	// Reads only, and lazily: ingest accepts starts while PostgreSQL is down.
	var pools []*pgxpool.Pool
	for _, url := range cfg.StoreURLs() {
		if url == "" {
			break
		}
		db, err := store.NewPoolWith(ctx, url, PoolOptions(cfg))
		if err != nil {
			return fmt.Errorf("postgres: %w", err)
		}
		defer db.Close()
		pools = append(pools, db)
	}
	var db *pgxpool.Pool
	if len(pools) > 0 {
		db = pools[0]
	}
	// Ingest's and the bindings' metrics, and the process's, on /metrics
	// (and on metrics_addr, if set).
	metrics := prometheus.NewRegistry()
	ms, err := startMetrics(ctx, cfg, metrics, log)
	if err != nil {
		return err
	}
	defer ms.stop()
	icfg := IngestConfig(cfg)
	icfg.Topology, icfg.NC, icfg.DB, icfg.Logger, icfg.Metrics = top, nc, db, log, metrics
	if len(cfg.Stores) > 0 {
		icfg.Stores = pools
	}
	icfg.Auth = authn
	// Bindings consume the users' own streams; one whose stream does not
	// exist yet waits for it, logging, and holds nothing else up. The API
	// shows them (GET /api/harvest/webhooks).
	bindings, err := binding.New(binding.Config{Topology: top, Bindings: cfg.Bindings, StartPolicies: cfg.StartPolicies(), TaskQueues: cfg.TaskQueues(),
		Metrics: metrics, Logger: log})
	if err != nil {
		return err
	}
	icfg.Bindings = bindings
	api, err := ingest.New(icfg)
	if err != nil {
		return err
	}
	if err := api.Start(ctx); err != nil {
		return err
	}
	defer func() {
		if err := api.Stop(context.Background()); err != nil {
			log.Warn("stop ingest", "err", err)
		}
	}()
	if err := bindings.Start(ctx); err != nil {
		return err
	}
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := bindings.Stop(stopCtx); err != nil {
			log.Warn("stop bindings", "err", err)
		}
	}()
	srv := api.HTTPServer(cfg.HTTPAddr)
	errc := make(chan error, 1)
	go func() { errc <- srv.ListenAndServe() }()
	log.Info("ingest ready", "addr", cfg.HTTPAddr)
	select {
	case err := <-errc:
		return fmt.Errorf("http: %w", err)
	case <-ctx.Done():
	}
	log.Info("ingest stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	if err := srv.Shutdown(stopCtx); err != nil && !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}
