// Command worker runs Harvest's example workflows (onboarding, charge) from
// a task queue. Your own workers embed the harvest package the same way.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

func main() {
	configPath := flag.String("config", os.Getenv("HARVEST_CONFIG"), "YAML configuration file (HARVEST_CONFIG)")
	flag.Parse()
	if err := run(*configPath); err != nil {
		fmt.Fprintln(os.Stderr, "worker:", err)
		os.Exit(1)
	}
}

func run(configPath string) error {
	cfg, err := config.Load(configPath)
	if err != nil {
		return err
	}
	log := cfg.Logger().With("service", "worker")
	ctx, stop := service.SignalContext()
	defer stop()
	nc, _, err := service.ConnectNATS(ctx, cfg, "harvest-worker", log)
	if err != nil {
		return err
	}
	defer nc.Close()
	w, err := harvest.NewWorker(harvest.WorkerConfig{
		NATS: nc, TaskQueue: cfg.TaskQueue, TaskAckWait: time.Duration(cfg.TaskAckWait),
		ShutdownGrace: time.Duration(cfg.ShutdownGrace), DisableEagerActivities: cfg.DisableEagerActivities, Logger: log,
	})
	if err != nil {
		return err
	}
	svc := examples.NewServices()
	if url := os.Getenv("HARVEST_FAKEPAY_URL"); url != "" {
		// The examples' payment provider, served elsewhere (by a test).
		svc.PaymentsAPI = fakepay.NewClient(url)
	}
	examples.Register(w, svc)
	if err := w.Start(ctx); err != nil {
		return err
	}
	log.Info("worker ready")
	<-ctx.Done()
	stop() // a second signal kills the process
	// Stop hands back the tasks not started at once, and lets those
	// running finish within shutdown_grace.
	log.Info("worker stopping")
	return w.Stop(context.Background())
}
