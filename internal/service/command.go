package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/config"
)

// RunFunc runs a service until ctx ends (on SIGINT or SIGTERM), then stops
// it.
type RunFunc func(ctx context.Context, cfg config.Config, log *slog.Logger) error

// Command is the command line of a service binary, with the flags every
// service shares: --config (HARVEST_CONFIG). Its run loads the
// configuration, builds the logger, and calls run with a context that ends
// on the first SIGINT or SIGTERM (a second one kills the process).
func Command(name, short string, run RunFunc) *cobra.Command {
	var configPath string
	cmd := &cobra.Command{
		Use:           name,
		Short:         short,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(configPath)
			if err != nil {
				return err
			}
			ctx, stop := SignalContext()
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // the default again: a second signal kills the process
			}()
			return run(ctx, cfg, cfg.Logger(cmd.ErrOrStderr()).With("service", name))
		},
	}
	cmd.Flags().StringVar(&configPath, "config", os.Getenv("HARVEST_CONFIG"), "YAML configuration file (HARVEST_CONFIG)")
	return cmd
}

// Exit runs cmd with args and returns the process's exit code: 0, or 1
// after printing the error to stderr.
func Exit(cmd *cobra.Command, args []string, stderr io.Writer) int {
	cmd.SetArgs(args)
	if err := cmd.Execute(); err != nil {
		fmt.Fprintf(stderr, "%s: %v\n", cmd.Name(), err)
		return 1
	}
	return 0
}
