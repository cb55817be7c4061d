package devstack

import (
	"context"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
)

// startWorker starts the stack's worker, with the examples and what
// cfg.Register registers.
func (s *Stack) startWorker(ctx context.Context, cfg Config) error {
	wcfg := cfg.Worker
	wcfg.NATS, wcfg.Logger = s.nc, s.log.With("service", "worker")
	if wcfg.TracerProvider == nil {
		wcfg.TracerProvider = cfg.Tracing.Provider()
	}
	if wcfg.Metrics == nil {
		wcfg.Metrics = cfg.Ingest.Metrics
	}
	var err error
	if s.worker, err = harvest.NewWorker(wcfg); err != nil {
		return err
	}
	examples.Register(s.worker, s.Services)
	if cfg.Register != nil {
		cfg.Register(s.worker)
	}
	if err := s.worker.Start(ctx); err != nil {
		return err
	}
	s.stops = append(s.stops, s.worker.Stop)
	return nil
}

// Worker is the stack's worker, nil with NoWorker.
func (s *Stack) Worker() *harvest.Worker { return s.worker }
