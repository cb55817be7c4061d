package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newExecutions() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "executions",
		Short: "Act on executions as a whole: prune the closed ones past their retention",
		Long: `A closed execution stays for its workflow's retention (retention, or
workflows.<name>.retention; 7 days by default), counted from its close;
then the scheduler holding its shard prunes it, with every row that names
it. Running executions are never pruned.`,
	}
	addClientFlags(cmd, 5*time.Minute, "give up after this long, waiting for the prune included (0: no limit)")
	cmd.AddCommand(newExecutionsPrune())
	return cmd
}

// Polling a prune: the first wait, doubled up to the last.
const (
	pruneFirstPoll = 200 * time.Millisecond
	pruneMaxPoll   = 2 * time.Second
)

func newExecutionsPrune() *cobra.Command {
	var dryRun bool
	cmd := &cobra.Command{
		Use:   "prune",
		Short: "Prune the closed executions past their retention now; --dry-run shows them by workflow",
		Long: `Without --dry-run (the admin scope): ask every scheduler to prune the closed
executions past their retention now rather than at its next look, print
what was past retention then, and wait until all of it is pruned (or
--timeout passes), printing progress on stderr. Executions that pass their
retention meanwhile are left to the schedulers' next look.

With --dry-run (the read scope): print, by workflow, the executions past
their retention and not pruned yet, with the oldest prune time, and the
closed executions without a prune time yet (closed before retention
existed: the schedulers give them theirs, their close plus their
retention, when they next look).`,
		Example: `  harvest executions prune --dry-run
  harvest executions prune --timeout 15m`,
		Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			out := cmd.OutOrStdout()
			if dryRun {
				r, err := c.Retention(ctx, time.Time{})
				if err != nil {
					return err
				}
				if jsonOutput(cmd) {
					return printRetentionJSON(out, r)
				}
				return printRetention(out, "", r)
			}
			asked, err := c.PruneNow(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				err = printRetentionJSON(out, asked)
			} else {
				err = printRetention(out, "asked the schedulers to prune; ", asked)
			}
			if err != nil || !asked.Pending() {
				return err
			}
			progress, done := cmd.ErrOrStderr(), out
			if jsonOutput(cmd) {
				done = progress // stdout holds the JSON answer alone
			}
			return waitPruned(ctx, c, asked, progress, done)
		}),
	}
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "only show what is past retention, by workflow; prune nothing")
	return cmd
}

// waitPruned polls what was past retention at asked.AsOf until none of
// it is left, printing progress when it changes, within ctx.
func waitPruned(ctx context.Context, c *client.Client, asked *client.RetentionResponse, progress, done io.Writer) error {
	last := asked
	wait := pruneFirstPoll
	timer := time.NewTimer(wait)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return notPruned(last, ctx.Err())
		case <-timer.C:
		}
		left, err := c.Retention(ctx, asked.AsOf)
		if err != nil {
			if ctx.Err() != nil {
				return notPruned(last, ctx.Err())
			}
			return err
		}
		if !left.Pending() {
			_, err := fmt.Fprintf(done, "pruned: nothing past retention as of %s is left\n", formatTime(asked.AsOf))
			return err
		}
		if left.PastRetention != last.PastRetention || left.ClosedWithoutPruneAfter != last.ClosedWithoutPruneAfter {
			fmt.Fprintf(progress, "pruning: %s past retention left, %d closed without a prune time\n",
				executionsCount(left.PastRetention), left.ClosedWithoutPruneAfter)
		}
		last = left
		wait = min(2*wait, pruneMaxPoll)
		timer.Reset(wait)
	}
}

// notPruned is the error of a wait that ended (err) before the prune did.
func notPruned(last *client.RetentionResponse, err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		err = errors.New("--timeout passed")
	}
	return fmt.Errorf("%s past retention as of %s and %d closed without a prune time are still there: %w; "+
		"the schedulers go on pruning (is every shard held? see harvest_retention_backlog_executions on their metrics)",
		executionsCount(last.PastRetention), formatTime(last.AsOf), last.ClosedWithoutPruneAfter, err)
}

// printRetention prints what is past retention: a line of totals, then a
// line per workflow.
func printRetention(w io.Writer, lead string, r *client.RetentionResponse) error {
	if !r.Pending() {
		_, err := fmt.Fprintf(w, "%sas of %s nothing is past retention\n", lead, formatTime(r.AsOf))
		return err
	}
	if _, err := fmt.Fprintf(w, "%sas of %s: %s past retention, %d closed without a prune time yet\n",
		lead, formatTime(r.AsOf), executionsCount(r.PastRetention), r.ClosedWithoutPruneAfter); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "WORKFLOW\tPAST_RETENTION\tOLDEST_PRUNE_AFTER\tCLOSED_WITHOUT_PRUNE_AFTER")
	for _, wf := range r.Workflows {
		oldest := "-"
		if wf.OldestPruneAfter != nil {
			oldest = formatTime(*wf.OldestPruneAfter)
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%d\n", wf.WorkflowName, wf.PastRetention, oldest, wf.ClosedWithoutPruneAfter)
	}
	return tw.Flush()
}

func printRetentionJSON(w io.Writer, r *client.RetentionResponse) error {
	return printValue(w, r)
}

func executionsCount(n int64) string {
	if n == 1 {
		return "1 execution"
	}
	return fmt.Sprintf("%d executions", n)
}
