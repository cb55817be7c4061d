package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/store"
)

func newMigrate() *cobra.Command {
	var databaseURL string
	cmd := &cobra.Command{
		Use:   "migrate",
		Short: "Apply the PostgreSQL schema migrations",
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := config.Load(os.Getenv("HARVEST_CONFIG"))
			if err != nil {
				return err
			}
			if databaseURL != "" {
				cfg.DatabaseURL = databaseURL
			}
			ctx, stop := service.SignalContext()
			defer stop()
			db, err := service.ConnectDB(ctx, cfg, cfg.Logger(cmd.ErrOrStderr()))
			if err != nil {
				return err
			}
			defer db.Close()
			applied, err := store.Migrate(ctx, db)
			if err != nil {
				return err
			}
			if len(applied) == 0 {
				fmt.Fprintln(cmd.OutOrStdout(), "schema is up to date")
				return nil
			}
			fmt.Fprintf(cmd.OutOrStdout(), "applied migrations %v\n", applied)
			return nil
		},
	}
	cmd.Flags().StringVar(&databaseURL, "database-url", "", "PostgreSQL URL (default HARVEST_DATABASE_URL)")
	return cmd
}
