package main

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newWorkflowReset() *cobra.Command {
	var (
		to, reason string
		dryRun     bool
		reapply    bool
	)
	cmd := &cobra.Command{
		Use:   "reset <execution-id> --to <point>",
		Short: "Reset an execution to one of its workflow tasks: a new run of its workflow_id starts from there",
		Long: `Reset an execution to one of its workflow tasks (docs/reset.md). A new run of
its workflow_id starts with the events that task's code saw; the task and
everything after it are run again by the code deployed now. The signals the
run received after the point are received again, with their keys. An
activity the new run schedules at the same position as before, with the
same name, keeps its idempotency key, so that a provider that saw the
effect answers from its own dedupe. A running execution closes Terminated.

--to names the point:
  first_task, last_task       the run's first or last workflow task
  seq:N                       the workflow task recorded at event N (a WorkflowTaskCompleted)
  activity:NAME[:OCCURRENCE]  the task that scheduled an activity: its last
                              occurrence, or first, last or last_failed

--dry-run prints what the reset would do and changes nothing.`,
		Example: `  harvest workflow reset 01a2… --to activity:charge_card:last_failed --dry-run
  harvest workflow reset 01a2… --to activity:charge_card:last_failed --reason "provider outage"`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			target, err := resetTo(to)
			if err != nil {
				return err
			}
			req := client.ResetRequest{To: target, Reason: reason}
			if !reapply {
				req.ReapplySignals = &reapply
			}
			if dryRun {
				plan, err := c.PlanReset(ctx, args[0], req)
				if err != nil {
					return err
				}
				if jsonOutput(cmd) {
					raw, _ := json.Marshal(plan)
					return printJSON(cmd.OutOrStdout(), raw)
				}
				return printResetPlan(cmd, plan)
			}
			r, err := c.Reset(ctx, args[0], req)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				raw, _ := json.Marshal(r)
				return printJSON(cmd.OutOrStdout(), raw)
			}
			again := ""
			if r.Deduplicated {
				again = " (the same reset was applied before)"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "reset execution %s to event %d: new run %s (workflow %s, workflow_id %s)%s\n",
				r.ResetFrom, r.PointSeq, r.ExecutionID, r.WorkflowName, r.WorkflowID, again)
			return err
		}),
	}
	cmd.Flags().StringVar(&to, "to", "", "the point: first_task, last_task, seq:N or activity:NAME[:first|last|last_failed] (required)")
	cmd.Flags().StringVar(&reason, "reason", "", "why, recorded with the reset")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "print what the reset would do, and change nothing")
	cmd.Flags().BoolVar(&reapply, "reapply-signals", true, "the new run receives again the signals the run received after the point")
	_ = cmd.MarkFlagRequired("to")
	return cmd
}

// resetTo turns --to into a reset's "to".
func resetTo(to string) (json.RawMessage, error) {
	switch {
	case to == "first_task" || to == "last_task":
		return json.Marshal(to)
	case strings.HasPrefix(to, "seq:"):
		n, err := strconv.Atoi(strings.TrimPrefix(to, "seq:"))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("--to %q: want seq:N with N the seq of a WorkflowTaskCompleted event", to)
		}
		return json.Marshal(map[string]int{"seq": n})
	case strings.HasPrefix(to, "activity:"):
		name, occurrence, _ := strings.Cut(strings.TrimPrefix(to, "activity:"), ":")
		if name == "" {
			return nil, fmt.Errorf("--to %q: want activity:NAME or activity:NAME:OCCURRENCE", to)
		}
		m := map[string]string{"activity": name}
		if occurrence != "" {
			m["occurrence"] = occurrence
		}
		return json.Marshal(m)
	}
	return nil, fmt.Errorf("--to %q: want first_task, last_task, seq:N or activity:NAME[:first|last|last_failed]", to)
}

func printResetPlan(cmd *cobra.Command, p *client.ResetPlan) error {
	var b strings.Builder
	fmt.Fprintf(&b, "reset of execution %s to workflow task %d (event %d): events 1 to %d kept, %d after them not\n",
		p.ExecutionID, p.TaskID, p.PointSeq, p.EventsKept, p.EventsDropped)
	section := func(title string, n int) {
		fmt.Fprintf(&b, "%s: ", title)
		if n == 0 {
			b.WriteString("none\n")
			return
		}
		b.WriteString("\n")
	}
	section("activities run again by the code, each keeping its key where it is the same activity at the same position", len(p.ActivitiesRerun))
	for _, a := range p.ActivitiesRerun {
		fmt.Fprintf(&b, "  %d %s  key %s\n", a.ActivityID, a.ActivityName, a.IdempotencyKey)
	}
	section("activities open at the point, dispatched again at once with their keys", len(p.ActivitiesPending))
	for _, a := range p.ActivitiesPending {
		fmt.Fprintf(&b, "  %d %s  key %s\n", a.ActivityID, a.ActivityName, a.IdempotencyKey)
	}
	section("timers set again", len(p.TimersPending))
	for _, t := range p.TimersPending {
		fmt.Fprintf(&b, "  %d fires at %s\n", t.TimerID, formatTime(t.FireAt))
	}
	section("signals received again", len(p.SignalsReapplied))
	for _, s := range p.SignalsReapplied {
		key := s.IdempotencyKey
		if key == "" {
			key = "-"
		}
		fmt.Fprintf(&b, "  event %d %s  key %s\n", s.Seq, s.SignalName, key)
	}
	points := make([]string, len(p.ValidPoints))
	for i, n := range p.ValidPoints {
		points[i] = strconv.Itoa(n)
	}
	fmt.Fprintf(&b, "valid points (seq:N): %s\n", strings.Join(points, ", "))
	_, err := fmt.Fprint(cmd.OutOrStdout(), b.String())
	return err
}
