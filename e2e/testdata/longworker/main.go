// Command longworker is a worker of the long-lived workflows of the scale
// checks (e2e/internal/long, e2e/long_test.go): long_signals, which
// receives many keyed signals, and long_activities, which runs many
// activities.
package main

import (
	"context"
	"log/slog"
	"os"

	"github.com/harvest-engine/harvest/e2e/internal/long"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	cmd := service.Command("worker", "Run the long-lived workflows of the scale checks", run, service.FlagAdminAddr, service.FlagTaskQueue)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	return service.RunWorker(ctx, cfg, log, long.Register)
}
