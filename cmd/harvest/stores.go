package main

import (
	"fmt"
	"slices"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/store"
)

func newStores() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "stores",
		Short: "The PostgreSQL stores of a deployment with several (docs/deploy.md)",
	}
	cmd.AddCommand(newStoresDrain())
	return cmd
}

func newStoresDrain() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "drain <name>",
		Short: "Check a store before draining it to read_only, and say how",
		Long: `Drain checks the store named in the configuration's stores before it is
drained (set to mode read_only): a drained store serves its executions to
completion and takes no new ones. It warns when start keys inside their
idempotency window still point at the store: a same-key retry after the
drain is placed on another store and can start a second execution. It
changes nothing itself: the drain is the configuration's mode.`,
		Args: cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			cfg, log, _, err := service.LoadConfig(cmd, "")
			if err != nil {
				return err
			}
			name := args[0]
			i := slices.IndexFunc(cfg.Stores, func(s config.StoreConfig) bool { return s.Name == name })
			if i < 0 {
				return fmt.Errorf("no store %q in the configuration's stores", name)
			}
			ctx, stop := service.SignalContext()
			defer stop()
			one := cfg
			one.Stores = []config.StoreConfig{cfg.Stores[i]}
			pools, err := service.ConnectStores(ctx, one, log)
			if err != nil {
				return err
			}
			defer pools[0].Close()
			r, err := store.ReportDrain(ctx, pools[0])
			if err != nil {
				return err
			}
			out, errOut := cmd.OutOrStdout(), cmd.ErrOrStderr()
			if r.LiveKeys > 0 {
				fmt.Fprintf(errOut, "warning: %d start key(s) inside their idempotency window point at store %s, until %s: "+
					"a same-key retry after the drain is placed on another store and may start a second execution "+
					"(keyed dedup holds while the writable stores stay the same). Drain after that time to be safe.\n",
					r.LiveKeys, name, r.Until.UTC().Format(time.RFC3339))
			}
			fmt.Fprintf(out, "store %s: %d running execution(s) and %d deferred start(s) finish there once it is read_only; %d live start key(s)\n",
				name, r.Running, r.Deferred, r.LiveKeys)
			if cfg.Stores[i].Mode == string(placement.ReadOnly) {
				fmt.Fprintf(out, "store %s is read_only already\n", name)
				return nil
			}
			fmt.Fprintf(out, "to drain it: set mode: read_only on store %s in the configuration, then restart ingest and the schedulers\n", name)
			return nil
		},
	}
	service.AddConfigFlag(cmd.Flags(), "")
	return cmd
}
