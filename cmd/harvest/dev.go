package main

import (
	"cmp"
	"context"
	"os"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/devstack"
	"github.com/harvest-engine/harvest/internal/service"
)

func newDev() *cobra.Command {
	var (
		addr     string
		stateDir string
		shards   int
		natsPort int
		cfgPath  string
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run ingest, scheduler and a worker with the examples in one process",
		Long: `Run the whole stack in one process: an embedded NATS server with JetStream
(store under --state-dir) and a private PostgreSQL started from the local
binaries, or the servers named by HARVEST_NATS_URL and HARVEST_DATABASE_URL.`,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("config") {
				if _, err := os.Stat(cfgPath); err != nil {
					cfgPath = "" // run from elsewhere than the repository: defaults
				}
			}
			cfg, err := config.Load(cfgPath)
			if err != nil {
				return err
			}
			log := cfg.Logger(cmd.ErrOrStderr())
			ctx, stop := service.SignalContext()
			defer stop()
			dc, err := service.DevConfig(cfg, log)
			if err != nil {
				return err
			}
			dc.StateDir, dc.Addr, dc.NATSPort = stateDir, addr, natsPort
			if dc.Ingest.Auth, err = service.APIAuth(cfg, addr, log); err != nil {
				return err
			}
			dc.Streams.Shards = cmp.Or(shards, dc.Streams.Shards)
			stack, err := devstack.Start(ctx, dc)
			if err != nil {
				return err
			}
			log.Info("harvest dev ready", "url", stack.URL(), "nats", stack.NATSURL(), "state_dir", stateDir)
			<-ctx.Done()
			stop() // a second signal kills the process
			log.Info("harvest dev stopping")
			// The worker lets running activities finish within
			// shutdown_grace; the other services stop in seconds.
			stopCtx, cancel := context.WithTimeout(context.Background(), cmp.Or(time.Duration(cfg.ShutdownGrace), harvest.DefaultShutdownGrace)+15*time.Second)
			defer cancel()
			return stack.Stop(stopCtx)
		},
	}
	cmd.Flags().StringVar(&addr, "addr", "127.0.0.1:8080", "HTTP listen address")
	cmd.Flags().StringVar(&stateDir, "state-dir", ".harvest", "where the embedded NATS store and the private PostgreSQL live")
	cmd.Flags().IntVar(&shards, "shards", 0, "logical shards, fixed for a state dir's life (default: the config's, else the state dir's, else 1)")
	cmd.Flags().IntVar(&natsPort, "nats-port", 0, "embedded NATS client port (0 picks a free one)")
	cmd.Flags().StringVar(&cfgPath, "config", envOr("HARVEST_CONFIG", "configs/harvest.dev.yaml"), "YAML configuration file (HARVEST_CONFIG)")
	return cmd
}
