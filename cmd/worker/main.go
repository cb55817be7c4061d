// Command worker runs Harvest's example workflows (onboarding, charge) from
// a task queue. Your own workers embed the harvest package the same way.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	cmd := service.Command("worker", "Run Harvest's example workflows from a task queue", run, service.FlagAdminAddr, service.FlagTaskQueue)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	svc := examples.NewServices()
	if cfg.FakepayURL != "" {
		// The examples' payment provider, served elsewhere (harvest
		// fakepay, or a test), so that every worker charges through it.
		svc.PaymentsAPI = fakepay.NewClient(cfg.FakepayURL)
	}
	return service.RunWorker(ctx, cfg, log, func(w *harvest.Worker) { examples.Register(w, svc) })
}
