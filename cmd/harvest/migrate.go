package main

import (
	"errors"
	"fmt"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/store"
)

// errNoDatabase is harvest migrate's answer when nothing names a database.
var errNoDatabase = errors.New("no database to migrate: pass --database-url postgres://…, " +
	"or set HARVEST_DATABASE_URL, or database_url in the --config file")

func newMigrate() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the PostgreSQL schema migrations",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, log, _, err := service.LoadConfig(cmd, "")
			if err != nil {
				return err
			}
			if cfg.StoreURLs()[0] == "" {
				return errNoDatabase
			}
			ctx, stop := service.SignalContext()
			defer stop()
			pools, err := service.ConnectStores(ctx, cfg, log)
			if err != nil {
				return err
			}
			defer func() {
				for _, db := range pools {
					db.Close()
				}
			}()
			for i, db := range pools {
				applied, err := store.Migrate(ctx, db)
				if err != nil {
					return err
				}
				prefix := ""
				if len(cfg.Stores) > 0 {
					prefix = "store " + cfg.Stores[i].Name + ": "
				}
				if len(applied) == 0 {
					fmt.Fprintln(cmd.OutOrStdout(), prefix+"schema is up to date")
					continue
				}
				fmt.Fprintf(cmd.OutOrStdout(), "%sapplied migrations %v\n", prefix, applied)
			}
			return nil
		},
	}
	cmd.Flags().SortFlags = false
	service.AddFlags(cmd.Flags(), service.FlagDatabaseURL)
	service.AddConfigFlag(cmd.Flags(), "")
	return cmd
}
