package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newBatch() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "batch",
		Short: "Cancel, terminate, signal or reset every execution a filter matches, as one durable job",
		Long: `A batch operation applies cancel, terminate, signal or reset to every
execution its filter matches that existed when it started, at a bounded
rate, each execution once whatever crashes (docs/batches.md). The
schedulers run it; describe shows its progress.`,
	}
	addClientFlags(cmd, time.Minute, "give up after this long (0: no limit)")
	cmd.AddCommand(newBatchStart(), newBatchDescribe(), newBatchList(), newBatchCancel())
	return cmd
}

func newBatchStart() *cobra.Command {
	var (
		req                     client.BatchRequest
		key, signal, payload    string
		to                      string
		reapply, wait, allFound bool
	)
	cmd := &cobra.Command{
		Use:   "start <cancel|terminate|signal|reset>",
		Short: "Start a batch operation over the executions a filter matches",
		Long: `Start a batch operation over the executions the filter flags match, each
condition holding (--all for every execution). A signal batch sends
--signal with --payload; a reset batch resets each execution to --to (as
harvest workflow reset takes it), resolved against its own history.
--wait follows its progress until it finishes.`,
		Example: `  harvest batch start reset --workflow checkout --status Failed --created-after 2026-12-07T09:00:00Z \
    --to activity:charge_card:last_failed --reason "provider outage" --rate 100 --wait
  harvest batch start terminate --workflow-id-prefix load-test- --reason cleanup
  harvest batch start signal --workflow collect --status Running --signal item --payload '{"sku": "x"}'`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			req.Operation, req.All = args[0], allFound
			if signal != "" || payload != "" {
				req.Signal = &client.BatchSignalSpec{Name: signal}
				if payload != "" {
					if !json.Valid([]byte(payload)) {
						return fmt.Errorf("--payload is not JSON: %s", payload)
					}
					req.Signal.Payload = json.RawMessage(payload)
				}
			}
			if to != "" {
				point, err := resetTo(to)
				if err != nil {
					return err
				}
				req.Reset = &client.BatchResetSpec{To: point}
				if !reapply {
					req.Reset.ReapplySignals = &reapply
				}
			}
			b, err := c.StartBatch(ctx, req, key)
			if err != nil {
				return err
			}
			if wait {
				if b, err = waitBatch(ctx, c, cmd, b.BatchID); err != nil {
					return err
				}
			}
			return printBatch(cmd, b)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Filter.Workflow, "workflow", "", "executions of this workflow")
	f.StringVar(&req.Filter.Status, "status", "", "executions of this status (Running, Failed, …)")
	f.StringVar(&req.Filter.CreatedAfter, "created-after", "", "executions created at or after this RFC 3339 time")
	f.StringVar(&req.Filter.CreatedBefore, "created-before", "", "executions created before this RFC 3339 time")
	f.StringVar(&req.Filter.KeyPrefix, "key-prefix", "", "executions whose start's idempotency key begins with this")
	f.StringVar(&req.Filter.WorkflowIDPrefix, "workflow-id-prefix", "", "executions whose workflow_id begins with this")
	f.BoolVar(&allFound, "all", false, "every execution: a batch with no filter condition needs it")
	f.StringVar(&signal, "signal", "", "a signal batch's signal name")
	f.StringVar(&payload, "payload", "", "a signal batch's payload, JSON")
	f.StringVar(&to, "to", "", "a reset batch's point: first_task, last_task, seq:N or activity:NAME[:first|last|last_failed]")
	f.BoolVar(&reapply, "reapply-signals", true, "a reset batch's new runs receive again the signals received after the point")
	f.StringVar(&req.Reason, "reason", "", "why, recorded with each operation")
	f.IntVar(&req.Rate, "rate", 0, "executions a second, in each store, 1 to 1000 (default 50)")
	f.StringVar(&key, "idempotency-key", "", "the same key is the same batch: a retry answers it")
	f.BoolVar(&wait, "wait", false, "follow the batch until it finishes")
	return cmd
}

// waitBatch polls batch id until it is no longer running, printing its
// progress when it moves.
func waitBatch(ctx context.Context, c *client.Client, cmd *cobra.Command, id string) (*client.BatchOperation, error) {
	var last string
	for {
		b, err := c.Batch(ctx, id)
		if err != nil {
			return nil, err
		}
		if line := fmt.Sprintf("%s: %d matched, %d done, %d failed", b.State, b.Matched, b.Done, b.Failed); line != last && !jsonOutput(cmd) {
			fmt.Fprintln(cmd.ErrOrStderr(), line)
			last = line
		}
		if b.State != "running" {
			return b, nil
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
	}
}

func newBatchDescribe() *cobra.Command {
	return &cobra.Command{
		Use:   "describe <batch-id>",
		Short: "Show a batch operation's progress and the executions it was refused on",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			b, err := c.Batch(ctx, args[0])
			if err != nil {
				return err
			}
			return printBatch(cmd, b)
		}),
	}
}

func newBatchList() *cobra.Command {
	var limit int
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the newest batch operations",
		Args:  cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			bs, err := c.ListBatches(ctx, limit)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), client.ListBatchesResponse{Batches: bs})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "BATCH_ID\tOPERATION\tSTATE\tMATCHED\tDONE\tFAILED\tCREATED\tFILTER")
			for _, b := range bs {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%d\t%d\t%s\t%s\n", b.BatchID, b.Operation, b.State, b.Matched, b.Done, b.Failed,
					formatTime(b.CreatedAt), filterText(b.Filter))
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().IntVar(&limit, "limit", 0, "at most this many, 1 to 500 (default 50)")
	return cmd
}

func newBatchCancel() *cobra.Command {
	return &cobra.Command{
		Use:   "cancel <batch-id>",
		Short: "Cancel a batch operation: it sends its operation to no more executions",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			b, err := c.CancelBatch(ctx, args[0])
			if err != nil {
				return err
			}
			return printBatch(cmd, b)
		}),
	}
}

// filterText says a batch's filter on one line.
func filterText(f client.BatchFilter) string {
	var parts []string
	for _, kv := range [][2]string{{"workflow", f.Workflow}, {"status", f.Status}, {"created_after", f.CreatedAfter},
		{"created_before", f.CreatedBefore}, {"key_prefix", f.KeyPrefix}, {"workflow_id_prefix", f.WorkflowIDPrefix}} {
		if kv[1] != "" {
			parts = append(parts, kv[0]+"="+kv[1])
		}
	}
	if len(parts) == 0 {
		return "all"
	}
	return strings.Join(parts, " ")
}

// printBatch prints a batch: a few lines for people, the API's answer
// with --json.
func printBatch(cmd *cobra.Command, b *client.BatchOperation) error {
	if jsonOutput(cmd) {
		return printValue(cmd.OutOrStdout(), b)
	}
	out := cmd.OutOrStdout()
	fmt.Fprintf(out, "batch %s: %s of %s, %s\n", b.BatchID, b.Operation, filterText(b.Filter), b.State)
	fmt.Fprintf(out, "  %d matched, %d done, %d failed, at %d a second; created %s", b.Matched, b.Done, b.Failed, b.Rate, formatTime(b.CreatedAt))
	if b.FinishedAt != nil {
		fmt.Fprintf(out, ", finished %s", formatTime(*b.FinishedAt))
	}
	fmt.Fprintln(out)
	if b.Reason != "" {
		fmt.Fprintf(out, "  reason: %s\n", b.Reason)
	}
	return printBatchErrors(out, b.Errors)
}

func printBatchErrors(out io.Writer, errs []client.BatchError) error {
	if len(errs) == 0 {
		return nil
	}
	fmt.Fprintln(out, "  refused on:")
	for _, e := range errs {
		if _, err := fmt.Fprintf(out, "    %s  %s: %s\n", e.ExecutionID, e.Error, e.Message); err != nil {
			return err
		}
	}
	return nil
}
