package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newCommands() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "commands",
		Short: "Inspect commands: their outcomes, and the ones set aside as dead",
		Long: `Commands are what ingest and workers send the scheduler: starts, signals,
cancellations, workflow task and activity results. A command the scheduler
cannot apply for a reason retrying would not fix (PostgreSQL refuses a value
it carries, or the message is not a command) is set aside as dead, so the
rest of its shard goes on; its outcome is the error command_rejected.`,
	}
	addClientFlags(cmd, 30*time.Second, "give up after this long (0: no limit)")
	cmd.AddCommand(newCommandsGet(), newCommandsDead())
	return cmd
}

func newCommandsGet() *cobra.Command {
	return &cobra.Command{
		Use:   "get <command-id>",
		Short: "Show a command's outcome (GET /api/harvest/commands/{command_id})",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return callAPI(cmd, "GET", "/api/harvest/commands/"+args[0], nil, func(out io.Writer, raw []byte) error {
				var c client.CommandResponse
				if err := json.Unmarshal(raw, &c); err != nil {
					return err
				}
				fmt.Fprintf(out, "command %s: %s", c.CommandID, c.Status)
				if c.HTTPStatus != 0 {
					fmt.Fprintf(out, ", answered %d", c.HTTPStatus)
				}
				_, err := fmt.Fprintf(out, "\noutcome: %s\n", compactJSON(c.Outcome))
				return err
			})
		},
	}
}

func newCommandsDead() *cobra.Command {
	var (
		opts  client.DeadCommandsOptions
		shard int
	)
	cmd := &cobra.Command{
		Use:   "dead [id]",
		Short: "List the commands set aside as dead, newest first, or show one with its message",
		Args:  cobra.MaximumNArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if len(args) == 1 {
				id, err := strconv.ParseInt(args[0], 10, 64)
				if err != nil || id < 1 {
					return fmt.Errorf("dead command id %q: want a positive number", args[0])
				}
				d, err := c.DeadCommand(ctx, id)
				if err != nil {
					return err
				}
				if jsonOutput(cmd) {
					return printValue(cmd.OutOrStdout(), d)
				}
				tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 1, ' ', 0)
				payload := compactJSON(d.Payload)
				if d.PayloadBase64 != "" {
					payload = "(not JSON, base64) " + d.PayloadBase64
				}
				for _, kv := range [][2]string{{"id", strconv.FormatInt(d.ID, 10)}, {"shard", strconv.Itoa(d.Shard)},
					{"stream_seq", strconv.FormatUint(d.StreamSeq, 10)}, {"kind", d.Kind}, {"command_id", orDash(d.CommandID)},
					{"subject", d.Subject}, {"error", d.Error}, {"reason", d.Reason}, {"dead_at", formatTime(d.DeadAt)}, {"payload", payload}} {
					fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
				}
				return tw.Flush()
			}
			if cmd.Flags().Changed("shard") {
				opts.Shard = &shard
			}
			dead, err := c.DeadCommands(ctx, opts)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), map[string]any{"dead_commands": dead})
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "ID\tSHARD\tSTREAM_SEQ\tKIND\tCOMMAND_ID\tERROR\tDEAD_AT\tREASON")
			for _, d := range dead {
				fmt.Fprintf(tw, "%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", d.ID, d.Shard, d.StreamSeq, d.Kind, orDash(d.CommandID), d.Error,
					formatTime(d.DeadAt), d.Reason)
			}
			return tw.Flush()
		}),
	}
	cmd.Flags().IntVar(&shard, "shard", 0, "only this shard's")
	cmd.Flags().Int64Var(&opts.Before, "before", 0, "only those older than this id (the next page)")
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many, 1 to 500 (default 50)")
	return cmd
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}
