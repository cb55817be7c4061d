package service

import (
	"context"
	"errors"
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
	pools, err := ConnectStores(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer func() {
		for _, db := range pools {
			db.Close()
		}
	}()
	// One scheduler per store, each applying that store's shards.
	var scheds []*scheduler.Scheduler
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		for _, s := range scheds {
			if err := s.Stop(stopCtx); err != nil {
				log.Warn("stop scheduler", "err", err)
			}
		}
	}()
	for i, db := range pools {
		if _, err := store.Migrate(ctx, db); err != nil {
			return err
		}
		scfg := SchedulerConfig(cfg)
		scfg.DB, scfg.Store, scfg.Topology, scfg.Metrics, scfg.Logger = db, i, top, metrics, log
		if len(cfg.Stores) > 0 {
			name := cfg.Stores[i].Name
			scfg.Logger = log.With("store", name)
			scfg.Metrics = prometheus.WrapRegistererWith(prometheus.Labels{"store": name}, metrics)
		}
		s, err := scheduler.New(scfg)
		if err != nil {
			return err
		}
		if err := s.Start(ctx); err != nil {
			return err
		}
		scheds = append(scheds, s)
	}
	adm.ready(func(ctx context.Context) []string {
		var reasons []string
		for _, s := range scheds {
			reasons = append(reasons, s.Ready(ctx)...)
		}
		return reasons
	})
	log.Info("scheduler ready", "owner", scheds[0].Owner(), "stores", len(scheds), "shards", top.Shards())
	<-ctx.Done()
	adm.stopping()
	log.Info("scheduler stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), stopTimeout)
	defer cancel()
	var errs []error
	for _, s := range scheds {
		errs = append(errs, s.Stop(stopCtx))
	}
	scheds = nil
	return errors.Join(errs...)
}
