// Command scheduler applies Harvest's commands to PostgreSQL for the shards
// it leases. Run several for availability.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/store"
)

func main() {
	configPath := flag.String("config", os.Getenv("HARVEST_CONFIG"), "YAML configuration file (HARVEST_CONFIG)")
	flag.Parse()
	if err := run(*configPath); err != nil {
		fmt.Fprintln(os.Stderr, "scheduler:", err)
		os.Exit(1)
	}
}

func run(configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	log := cfg.Logger().With("service", "scheduler")
	ctx, stop := service.SignalContext()
	defer stop()
	nc, top, err := service.ConnectNATS(ctx, cfg, "harvest-scheduler", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	db, err := service.ConnectDB(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer db.Close()
	if _, err := store.Migrate(ctx, db); err != nil {
		return err
	}
	s, err := scheduler.New(scheduler.Config{
		DB: db, Topology: top, Logger: log,
		LeaseTTL:               time.Duration(cfg.LeaseTTL),
		StartIdempotencyWindow: time.Duration(cfg.StartIdempotencyWindow),
		WorkflowTaskTimeout:    time.Duration(cfg.WorkflowTaskTimeout),
		CallbackPolicy:         callback.Policy{AllowHosts: cfg.CallbackAllowHosts},
	})
	if err != nil {
		return err
	}
	if err := s.Start(ctx); err != nil {
		return err
	}
	log.Info("scheduler ready", "owner", s.Owner(), "shards", top.Shards())
	<-ctx.Done()
	log.Info("scheduler stopping")
	stopCtx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return s.Stop(stopCtx)
}
