package main

import (
	"log/slog"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/service"
)

// devConfig is the one-process stack the configuration describes, for
// harvest dev and harvest bench; the state dir and addresses are the
// caller's. It fails on a credentials or TLS file it cannot read.
//
// It lives here rather than beside the services' translations in
// internal/service because it names devstack: the service binaries
// (cmd/ingest, cmd/scheduler, cmd/worker) import internal/service, and
// must not link the embedded NATS server and PostgreSQL that devstack runs.
func devConfig(cfg config.Config, log *slog.Logger) (devstack.Config, error) {
	natsOpts, err := service.NATSOptions(cfg)
	if err != nil {
		return devstack.Config{}, err
	}
	var stores []devstack.StoreConfig
	for _, st := range cfg.Stores {
		stores = append(stores, devstack.StoreConfig{Name: st.Name, DatabaseURL: st.DatabaseURL, Mode: storeMode(st.Mode)})
	}
	return devstack.Config{
		NATSURL:     cfg.NATSURL,
		NATSOptions: natsOpts,
		DatabaseURL: cfg.StoreURLs()[0],
		Stores:      stores,
		// The pool's size, as the services' own pools have it.
		DatabaseMaxConns: cfg.DatabaseMaxConns,
		Streams:          service.StreamsConfig(cfg),
		Scheduler:        service.SchedulerConfig(cfg),
		Ingest:           service.IngestConfig(cfg),
		Worker:           service.WorkerConfig(cfg),
		Bindings:         cfg.Bindings,
		Logger:           log,
	}, nil
}

// storeMode is a configured store's mode; unset is writable.
func storeMode(mode string) placement.Mode {
	if mode == "" {
		return placement.Writable
	}
	return placement.Mode(mode)
}
