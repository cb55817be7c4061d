package service

import (
	"context"
	"errors"
	"log/slog"

	"github.com/cenkalti/backoff/v5"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/config"
)

// RunWorker runs a worker on the configured task queue, with the workflows
// and activities register adds, until ctx ends; then it hands back the
// tasks not started and lets those running finish within shutdown_grace.
//
// With admin_addr it serves /healthz, /readyz (connected to NATS, the task
// queue's consumers bound) and /metrics there, from before it connects
// until it has stopped; with metrics_addr, /metrics alone there too.
func RunWorker(ctx context.Context, cfg config.Config, log *slog.Logger, register func(*harvest.Worker)) error {
	return RunWorkerConfig(ctx, cfg, WorkerConfig(cfg), log, register)
}

// RunWorkerConfig is RunWorker for a binary that sets worker settings the
// configuration does not hold (its BuildID, say): wcfg is
// WorkerConfig(cfg) with those set. Its NATS connection, metrics, logger
// and tracer provider are filled in here.
func RunWorkerConfig(ctx context.Context, cfg config.Config, wcfg harvest.WorkerConfig, log *slog.Logger, register func(*harvest.Worker)) error {
	metrics := prometheus.NewRegistry()
	adm, err := startAdmin(ctx, cfg, metrics, log)
	if err != nil {
		return err
	}
	defer adm.stop()
	// A worker binds to the topology the schedulers and ingest declared;
	// it never declares, so a worker configured otherwise cannot change a
	// deployment's replicas or TTLs.
	nc, err := DialNATS(ctx, cfg, "harvest-worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	tr, stopTracing, err := StartTracing(ctx, "harvest-worker", log)
	if err != nil {
		return err
	}
	defer stopTracing()
	wcfg.NATS, wcfg.Metrics, wcfg.Logger, wcfg.TracerProvider = nc, metrics, log, tr.Provider()
	w, err := harvest.NewWorker(wcfg)
	if err != nil {
		return err
	}
	register(w)
	// Started before the deployment's first scheduler or ingest, the
	// worker waits for them to declare the streams; started with a NATS
	// cluster that is still electing its leaders, it asks again. Only a
	// refused registration is final.
	if _, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := w.Start(ctx)
		switch {
		case err == nil:
			return struct{}{}, nil
		case errors.Is(err, harvest.ErrRegistration):
			return struct{}{}, backoff.Permanent(err)
		case errors.Is(err, harvest.ErrNotDeclared):
			log.Info("waiting for the deployment's streams", "err", err)
		default:
			log.Warn("waiting to bind the task queue", "err", err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(backoff.NewExponentialBackOff()), backoff.WithMaxElapsedTime(connectTimeout)); err != nil {
		return err
	}
	adm.ready(w.Ready)
	log.Info("worker ready")
	<-ctx.Done()
	adm.stopping()
	log.Info("worker stopping")
	return w.Stop(context.Background())
}
