package service

import (
	"context"
	"log/slog"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/config"
)

// RunWorker runs a worker on the configured task queue, with the workflows
// and activities register adds, until ctx ends; then it hands back the
// tasks not started and lets those running finish within shutdown_grace.
func RunWorker(ctx context.Context, cfg config.Config, log *slog.Logger, register func(*harvest.Worker)) error {
	nc, _, err := ConnectNATS(ctx, cfg, "harvest-worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	wcfg := WorkerConfig(cfg)
	wcfg.NATS, wcfg.Logger = nc, log
	w, err := harvest.NewWorker(wcfg)
	if err != nil {
		return err
	}
	register(w)
	if err := w.Start(ctx); err != nil {
		return err
	}
	log.Info("worker ready")
	<-ctx.Done()
	log.Info("worker stopping")
	return w.Stop(context.Background())
}
