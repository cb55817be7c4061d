package service

import (
	"context"
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
)

// RunScheduler runs a scheduler: it migrates the schema, leases shards and
// applies their commands until ctx ends.
//
// With admin_addr it serves /healthz, /readyz (Scheduler.Ready) and
// /metrics there, from before it connects until it has stopped; with
// metrics_addr, /metrics alone there too.
func RunScheduler(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	metrics := prometheus.NewRegistry()
	adm, err := startAdmin(ctx, cfg, metrics, log)
	if err != nil {
		return err
	}
	defer adm.stop()
	nc, top, err := ConnectNATS(ctx, cfg, "harvest-scheduler", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	tr, stopTracing, err := StartTracing(ctx, "harvest-scheduler", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	top.Tracing = tr
	db, err := ConnectDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := store.Migrate(ctx, db); err != nil {
		return err
	}
	scfg := SchedulerConfig(cfg)
	scfg.DB, scfg.Topology, scfg.Metrics, scfg.Logger = db, top, metrics, log
	s, err := scheduler.New(scfg)
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	adm.ready(s.Ready)
	log.Info("scheduler ready", "owner", s.Owner(), "shards", top.Shards())
	<-ctx.Done()
	adm.stopping()
	log.Info("scheduler stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	return s.Stop(stopCtx)
}
