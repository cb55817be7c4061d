package main

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/service"
)

// natsURLFile is where, in its state dir, harvest dev writes the NATS URL
// its workers connect to.
const natsURLFile = "nats.url"

// devConfigFile is the configuration harvest dev reads from the
// repository's root: the examples' webhooks and bindings.
const devConfigFile = "configs/harvest.dev.yaml"

// devWithoutConfig says what harvest dev without a configuration file
// lacks.
const devWithoutConfig = "no webhooks are configured (POST /hooks/{source} knows no source) and no bindings; " +
	"for the examples' (" + devConfigFile + "), run harvest dev from the repository's root or pass --config"

func newDev() *cobra.Command {
	var (
		stateDir string
		natsPort int
		worker   bool
	)
	cmd := &cobra.Command{
		Use:   "dev",
		Short: "Run ingest, scheduler and a worker with the examples in one process",
		Long: `Run the whole stack in one process: an embedded NATS server with JetStream
and a private PostgreSQL started from the local binaries, both keeping
their data under --state-dir, or the servers named by --nats-url and
--database-url (HARVEST_NATS_URL, HARVEST_DATABASE_URL).

One harvest dev at a time uses a state dir, and the state dir keeps the
shard count it was created with.

The embedded NATS server and the private PostgreSQL listen on 127.0.0.1
and require credentials, made at the first start and kept in the state
dir (credentials.json, mode 0600; the state dir is made 0700). Once ready
harvest dev prints export HARVEST_NATS_URL=nats://harvest:...@127.0.0.1:...,
the URL with its user and password, and writes it to nats.url in the state
dir (mode 0600): a worker of your own (harvest.NewWorker with no
connection) connects with it. --no-worker runs the stack without the
example worker.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if noWorker, _ := cmd.Flags().GetBool("no-worker"); noWorker {
				worker = false
			}
			cfg, log, file, err := service.LoadConfig(cmd, devConfigFile)
			if err != nil {
				return err
			}
			file.Log(log, devWithoutConfig)
			ctx, stop := service.SignalContext()
			defer stop()
			dc, err := devConfig(cfg, log)
			if err != nil {
				return err
			}
			dc.StateDir, dc.Addr, dc.NATSPort, dc.NoWorker = stateDir, cfg.HTTPAddr, natsPort, !worker
			tr, stopTracing, err := service.StartTracing(ctx, "harvest-dev", log)
			if err != nil {
				return err
			}
			defer stopTracing()
			dc.Tracing = tr
			if dc.Ingest.Auth, err = service.APIAuth(cfg, cfg.HTTPAddr, log); err != nil {
				return err
			}
			stack, err := devstack.Start(ctx, dc)
			if err != nil {
				return devStartError(err)
			}
			log.Info("harvest dev ready", "url", stack.URL(), "nats", stack.NATSURLRedacted(), "state_dir", stateDir, "worker", worker)
			// A worker of the user's own connects with this alone
			// (harvest.WorkerConfig reads HARVEST_NATS_URL). It holds the
			// embedded server's password: readable by this user alone.
			urlFile := filepath.Join(stateDir, natsURLFile)
			if err := devstack.WritePrivate(urlFile, []byte(stack.NATSURL()+"\n")); err != nil {
				log.Warn("could not write the NATS URL for your workers", "file", urlFile, "err", err)
			}
			fmt.Fprintf(cmd.OutOrStdout(), "export %s=%s\n", harvest.EnvNATSURL, stack.NATSURL())
			<-ctx.Done()
			_ = os.Remove(urlFile)
			stop() // a second signal kills the process
			log.Info("harvest dev stopping")
			// The worker lets running activities finish within
			// shutdown_grace; the other services stop in seconds.
			stopCtx, cancel := context.WithTimeout(context.Background(), cmp.Or(time.Duration(cfg.ShutdownGrace), harvest.DefaultShutdownGrace)+15*time.Second)
			defer cancel()
			return stack.Stop(stopCtx)
		},
	}
	f := cmd.Flags()
	f.SortFlags = false
	service.AddFlags(f, service.FlagAddr)
	f.StringVar(&stateDir, "state-dir", ".harvest", "where the embedded NATS store and the private PostgreSQL keep their data")
	service.AddFlags(f, service.FlagShards)
	f.Lookup(string(service.FlagShards)).Usage = "logical shards, fixed for a state dir's life (default $HARVEST_SHARDS, else the config file's shards, else the state dir's, else 1)"
	f.IntVar(&natsPort, "nats-port", 0, "the embedded NATS server's client port (0 picks a free one)")
	f.BoolVar(&worker, "worker", true, "run the example worker; --worker=false (or --no-worker) leaves the workflows to workers of your own")
	f.Bool("no-worker", false, "the same as --worker=false")
	service.AddConfigFlag(f, devConfigFile)
	service.AddFlags(f, service.FlagNATSURL, service.FlagDatabaseURL, service.FlagLogLevel, service.FlagLogFormat)
	return cmd
}

// devStartError says in harvest dev's flags what to do about a stack that
// cannot start.
func devStartError(err error) error {
	var (
		listen *devstack.ListenError
		shards *devstack.ShardsError
	)
	switch {
	case errors.As(err, &listen):
		flag := "--addr"
		if listen.Service == devstack.ServiceNATS {
			flag = "--nats-port"
		}
		if errors.Is(err, syscall.EADDRINUSE) {
			return fmt.Errorf("%w; another process (another harvest dev?) listens there: stop it, or pass another %s", err, flag)
		}
		return fmt.Errorf("%w; pass another %s", err, flag)
	case errors.Is(err, devstack.ErrStateDirInUse):
		return fmt.Errorf("%w: stop that harvest dev first, or pass another --state-dir", err)
	case errors.As(err, &shards) && shards.StateDir != "":
		return fmt.Errorf("%w: run harvest dev with --shards %d, or without --shards (and HARVEST_SHARDS, and the config file's shards); "+
			"or pass a fresh --state-dir for %s", err, shards.Have, plural(shards.Want, "shard"))
	}
	return err
}

// plural is "1 shard", "2 shards".
func plural(n int, noun string) string {
	if n == 1 {
		return "1 " + noun
	}
	return fmt.Sprintf("%d %ss", n, noun)
}
