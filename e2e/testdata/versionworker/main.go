// Command versionworker is a worker of one deploy of the versioned
// workflow (e2e/internal/versioned), for the versioning end-to-end tests:
// VERSION_VARIANT names the variant of the code it runs (v1, v2, v2bad),
// VERSION_BUILD_ID its build id (WorkerConfig.BuildID; unset, the
// default one) and VERSION_REPLAY_CHECK, when set, the sample of its
// replay check (WorkerConfig.ReplayCheck.Sample). A test deploys by stopping one of these processes and
// starting another with other variables.
package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strconv"

	"github.com/harvest-engine/harvest/e2e/internal/versioned"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	cmd := service.Command("worker", "Run one variant of the versioned workflow's code", run, service.FlagAdminAddr, service.FlagTaskQueue)
	os.Exit(service.Exit(cmd, os.Args[1:], os.Stderr))
}

func run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	register, err := versioned.Register(os.Getenv("VERSION_VARIANT"))
	if err != nil {
		return err
	}
	// Worker settings a deploy varies beyond the code go here, each from
	// a variable of its own.
	wcfg := service.WorkerConfig(cfg)
	wcfg.BuildID = os.Getenv("VERSION_BUILD_ID")
	if v := os.Getenv("VERSION_REPLAY_CHECK"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			return fmt.Errorf("VERSION_REPLAY_CHECK: %w", err)
		}
		wcfg.ReplayCheck.Sample = n
	}
	log.Info("versioned worker", "variant", os.Getenv("VERSION_VARIANT"), "build_id", wcfg.BuildID, "replay_check_sample", wcfg.ReplayCheck.Sample)
	return service.RunWorkerConfig(ctx, cfg, wcfg, log, register)
}
