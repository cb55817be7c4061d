package service

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/config"
)

// RunFunc runs a service until ctx ends (on SIGINT or SIGTERM), then stops
// it.
type RunFunc func(ctx context.Context, cfg config.Config, log *slog.Logger) error

// Command is the command line of a service binary. It takes the flags
// every service shares — --config (else HARVEST_CONFIG), --nats-url,
// --log-level and --log-format — and the configuration flags given (see
// Flag). Its run loads the configuration, builds the logger, logs which
// configuration file it read (or that it read none), and calls run with a
// context that ends on the first SIGINT or SIGTERM (a second one kills the
// process).
func Command(name, short string, run RunFunc, flags ...Flag) *cobra.Command {
	cmd := &cobra.Command{
		Use:           name,
		Short:         short,
		Args:          cobra.NoArgs,
		SilenceUsage:  true,
		SilenceErrors: true,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, file, err := LoadConfig(cmd, "")
			if err != nil {
				return err
			}
			log = log.With("service", name)
			file.Log(log, "")
			ctx, stop := SignalContext()
			defer stop()
			go func() {
				<-ctx.Done()
				stop() // the default again: a second signal kills the process
			}()
			return run(ctx, cfg, log)
		},
	}
	AddConfigFlag(cmd.Flags(), "")
	AddFlags(cmd.Flags(), append(flags, FlagNATSURL, FlagLogLevel, FlagLogFormat)...)
	cmd.Flags().SortFlags = false
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
