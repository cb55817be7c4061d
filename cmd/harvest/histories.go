package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dedup"
)

func newWorkflowHistories() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "histories",
		Short: "Export executions' histories, to replay them on new code before a deploy",
	}
	cmd.AddCommand(newWorkflowHistoriesExport())
	return cmd
}

func newWorkflowHistoriesExport() *cobra.Command {
	var workflow, status, out string
	var sample int
	cmd := &cobra.Command{
		Use:   "export --workflow NAME --out DIR",
		Short: "Write executions' histories as files, for harvesttest.ReplayHistories",
		Long: `Write the histories of a workflow's executions, newest first, one file
per execution (DIR/<workflow>/<execution_id>.json), for
harvesttest.ReplayHistories to replay on the code about to be deployed:
a change that would break running executions fails that test, before
the deploy. --status keeps one status (Running: the executions a deploy
meets); --sample caps how many. The files hold the executions' inputs
and results: they are written readable by their owner only (0600).`,
		Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := dedup.ValidateName(workflow); err != nil {
				return fmt.Errorf("--workflow: %w", err)
			}
			if out == "" {
				return errors.New("--out: the directory to write the histories to is required")
			}
			if sample < 1 {
				return fmt.Errorf("--sample %d: want at least 1", sample)
			}
			dir := filepath.Join(out, workflow)
			if err := os.MkdirAll(dir, 0o750); err != nil {
				return err
			}
			n, err := exportHistories(ctx, c, client.ListOptions{Workflow: workflow, Status: status}, sample, dir)
			fmt.Fprintf(cmd.OutOrStdout(), "wrote %d histories of %s to %s\n", n, workflow, dir)
			return err
		}),
	}
	cmd.Flags().StringVar(&workflow, "workflow", "", "the workflow whose executions to export (required)")
	cmd.Flags().StringVar(&status, "status", "", "only executions of this status (Running, Completed, …)")
	cmd.Flags().IntVar(&sample, "sample", 100, "export at most this many executions, newest first")
	cmd.Flags().StringVar(&out, "out", "", "the directory to write them under (required)")
	return cmd
}

// exportHistories writes up to limit executions' histories, newest first,
// to dir, and returns how many it wrote.
func exportHistories(ctx context.Context, c *client.Client, opts client.ListOptions, limit int, dir string) (int, error) {
	written := 0
	for written < limit {
		opts.Limit = min(limit-written, 500)
		page, err := c.ListPage(ctx, opts)
		if err != nil {
			return written, err
		}
		for _, e := range page.Executions {
			hist, err := c.History(ctx, e.ExecutionID)
			if err != nil {
				return written, fmt.Errorf("history of %s: %w", e.ExecutionID, err)
			}
			f := api.ExportedHistory{ExecutionID: e.ExecutionID, WorkflowName: e.WorkflowName, WorkflowID: e.WorkflowID,
				TaskQueue: e.TaskQueue, Status: e.Status, ExportedAt: time.Now().UTC(), History: hist}
			raw, err := json.MarshalIndent(f, "", "  ")
			if err != nil {
				return written, err
			}
			if err := os.WriteFile(filepath.Join(dir, e.ExecutionID+".json"), append(raw, '\n'), 0o600); err != nil {
				return written, err
			}
			written++
		}
		if page.NextCursor == "" || len(page.Executions) == 0 {
			return written, nil
		}
		opts.Cursor = page.NextCursor
	}
	return written, nil
}
