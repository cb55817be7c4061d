package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newSchedule() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "schedule",
		Short: "Create, inspect, pause, trigger, backfill and delete schedules: workflows started at the times a spec gives",
		Long: `A schedule starts its workflow at every time its spec gives (cron
expressions, a fixed interval, or both, in a time zone), each fire an
idempotent start keyed by the schedule and its nominal time
(docs/schedules.md). Its ledger of fires says what each time did.`,
	}
	addClientFlags(cmd, time.Minute, "give up after this long, waiting for a late outcome included (0: no limit)")
	cmd.AddCommand(newScheduleCreate(), newScheduleList(), newScheduleDescribe(), newSchedulePause(), newScheduleUnpause(),
		newScheduleTrigger(), newScheduleBackfill(), newScheduleDelete(), newScheduleFires())
	return cmd
}

// scheduleDefinitionFlags are the flags of create that make the
// definition, which --file gives whole instead.
var scheduleDefinitionFlags = []string{
	"workflow", "input", "task-queue", "cron", "every", "timezone", "start-at", "end-at", "jitter", "repeated-time",
	"overlap", "catchup-window", "pause-on-failure", "workflow-id-template", "paused", "note",
}

func newScheduleCreate() *cobra.Command {
	var (
		req            client.ScheduleRequest
		input, file    string
		startAt, endAt string
		cron           []string
	)
	cmd := &cobra.Command{
		Use:   "create <schedule-id>",
		Short: "Create a schedule, or replace the definition of the one with the id",
		Long: `Create the schedule <schedule-id>, or replace its definition: its firing
goes on from where it stands, under the new spec. The definition is the
flags, or --file, a JSON file holding the whole body of
PUT /api/harvest/schedules/{id} ("-": standard input). Print whether it
was created or replaced, and its next fire times.`,
		Example: `  harvest schedule create nightly-report --workflow report --cron '0 2 * * *' --timezone Europe/Berlin
  harvest schedule create every-minute --workflow charge --input '{"amount_cents": 100, "customer_id": "c"}' --every 1m --overlap buffer_one
  harvest schedule create nightly-report --file nightly-report.json`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			if file != "" {
				for _, name := range scheduleDefinitionFlags {
					if cmd.Flags().Changed(name) {
						return fmt.Errorf("--%s: --file holds the whole definition; give one or the other", name)
					}
				}
				var err error
				if req, err = readScheduleFile(cmd.InOrStdin(), file); err != nil {
					return err
				}
			} else {
				if req.Workflow == "" {
					return errors.New("--workflow is required (or --file)")
				}
				in, err := parseInput("input", input)
				if err != nil {
					return err
				}
				req.Input, req.Spec.Cron = in, cron
				if req.Spec.StartAt, err = parseTimeFlag("start-at", startAt); err != nil {
					return err
				}
				if req.Spec.EndAt, err = parseTimeFlag("end-at", endAt); err != nil {
					return err
				}
			}
			sc, created, err := c.PutSchedule(ctx, args[0], req)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), sc)
			}
			how := "replaced"
			if created {
				how = "created"
			}
			out := cmd.OutOrStdout()
			state := ""
			if sc.Paused {
				state = ", paused"
			}
			fmt.Fprintf(out, "%s schedule %s (workflow %s, %s%s)\n", how, sc.ScheduleID, sc.Workflow, specText(sc.Spec), state)
			return printNextFires(out, sc)
		}),
	}
	f := cmd.Flags()
	f.StringVar(&req.Workflow, "workflow", "", "the workflow each fire starts (required, unless --file)")
	f.StringVar(&input, "input", "", "the workflow's input, as JSON")
	f.StringVar(&req.TaskQueue, "task-queue", "", "the task queue of the executions (default: the workflow's configured one, else default)")
	f.StringArrayVar(&cron, "cron", nil, "a cron expression: 5 fields, 6 with seconds first, or @yearly, @monthly, @weekly, @daily, @hourly (repeatable)")
	f.StringVar(&req.Spec.Every, "every", "", "fire at this interval (such as 15m, at least 1s), counted from --start-at, else from the Unix epoch")
	f.StringVar(&req.Spec.Timezone, "timezone", "", "the IANA time zone of the cron expressions, such as Europe/Berlin (default UTC)")
	f.StringVar(&startAt, "start-at", "", "fire no time before this one (RFC 3339)")
	f.StringVar(&endAt, "end-at", "", "fire no time after this one (RFC 3339)")
	f.StringVar(&req.Spec.Jitter, "jitter", "", "put each fire off by up to this long (such as 30s), no longer than the interval between fires")
	f.StringVar(&req.Spec.RepeatedTime, "repeated-time", "", "which of a local time that occurs twice as daylight-saving time ends fires: first (the default) or both")
	f.StringVar(&req.Overlap, "overlap", "", "what a fire does while an earlier fire's execution runs: skip (the default), buffer_one, buffer_all, cancel_other, terminate_other or allow_all")
	f.StringVar(&req.CatchupWindow, "catchup-window", "", "how late a fire may still start after an outage (default 1h); older ones are recorded missed_catchup")
	f.BoolVar(&req.PauseOnFailure, "pause-on-failure", false, "pause the schedule when an execution it started fails or times out")
	f.StringVar(&req.WorkflowIDTemplate, "workflow-id-template", "", "each fire's workflow_id: {schedule_id}, {nominal_time} and {nominal_unix} are replaced (default {schedule_id}-{nominal_time})")
	f.BoolVar(&req.Paused, "paused", false, "create (or replace) it paused")
	f.StringVar(&req.Note, "note", "", "a note on why it is paused")
	f.StringVar(&file, "file", "", `a JSON file holding the whole definition, the body of PUT /api/harvest/schedules/{id} ("-": standard input)`)
	return cmd
}

// readScheduleFile reads a schedule's definition from the JSON file path
// ("-": in). A member the definition has not is refused, as the API
// refuses it.
func readScheduleFile(in io.Reader, path string) (client.ScheduleRequest, error) {
	var req client.ScheduleRequest
	var data []byte
	var err error
	if path == "-" {
		data, err = io.ReadAll(in)
	} else {
		data, err = os.ReadFile(path)
	}
	if err != nil {
		return req, fmt.Errorf("--file: %w", err)
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil {
		return req, fmt.Errorf("--file %s: not a schedule's definition: %w", path, err)
	}
	if dec.More() {
		return req, fmt.Errorf("--file %s: more than one JSON value", path)
	}
	return req, nil
}

// parseTimeFlag reads an RFC 3339 time flag: empty is none.
func parseTimeFlag(flag, s string) (*time.Time, error) {
	if s == "" {
		return nil, nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: want an RFC 3339 time, such as 2025-01-31T09:00:00Z", flag, s)
	}
	return &t, nil
}

// specText says when a spec fires, on one line.
func specText(spec client.ScheduleSpec) string {
	var parts []string
	for _, c := range spec.Cron {
		parts = append(parts, "cron "+c)
	}
	if spec.Every != "" {
		parts = append(parts, "every "+spec.Every)
	}
	s := cmp.Or(strings.Join(parts, "; "), "never")
	if spec.Timezone != "" {
		s += " in " + spec.Timezone
	}
	return s
}

// printNextFires prints a schedule's next fire times as a table.
func printNextFires(out io.Writer, sc *client.Schedule) error {
	if len(sc.NextFires) == 0 {
		_, err := fmt.Fprintln(out, "no next fires: the spec's end_at has passed")
		return err
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NEXT_FIRE\tDUE_AT")
	for _, nf := range sc.NextFires {
		fmt.Fprintf(tw, "%s\t%s\n", formatTime(nf.NominalTime), formatTime(nf.DueAt))
	}
	return tw.Flush()
}

func newScheduleList() *cobra.Command {
	var (
		opts client.ListSchedulesOptions
		all  bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List the schedules, by id",
		Example: `  harvest schedule list
  harvest schedule list --all --json`,
		Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			page, err := c.ListSchedules(ctx, opts)
			if err != nil {
				return err
			}
			for all && page.NextCursor != "" {
				next, err := c.ListSchedules(ctx, client.ListSchedulesOptions{Limit: opts.Limit, Cursor: page.NextCursor})
				if err != nil {
					return err
				}
				page.Schedules, page.NextCursor = append(page.Schedules, next.Schedules...), next.NextCursor
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), page)
			}
			out := cmd.OutOrStdout()
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "SCHEDULE_ID\tWORKFLOW\tSPEC\tSTATE\tNEXT_FIRE\tOVERLAP\tSOURCE")
			for _, sc := range page.Schedules {
				next := "-"
				if len(sc.NextFires) > 0 {
					next = formatTime(sc.NextFires[0].DueAt)
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", sc.ScheduleID, sc.Workflow, specText(sc.Spec), scheduleState(&sc), next, sc.Overlap, sc.Source)
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return printNextPage(out, page.NextCursor)
		}),
	}
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many a page, 1 to 500 (default 100)")
	cmd.Flags().StringVar(&opts.Cursor, "cursor", "", "the page after the one that printed this cursor")
	cmd.Flags().BoolVar(&all, "all", false, "every page")
	return cmd
}

// printNextPage says how to read the next page, when there is one.
func printNextPage(out io.Writer, cursor string) error {
	if cursor == "" {
		return nil
	}
	_, err := fmt.Fprintf(out, "more: --cursor %s (or --all)\n", cursor)
	return err
}

// scheduleState is whether a schedule is active or paused, with the
// pause's note.
func scheduleState(sc *client.Schedule) string {
	switch {
	case sc.Paused && sc.Note != "":
		return "paused (" + sc.Note + ")"
	case sc.Paused:
		return "paused"
	}
	return "active"
}

func newScheduleDescribe() *cobra.Command {
	return &cobra.Command{
		Use:   "describe <schedule-id>",
		Short: "Show a schedule: its definition, state, next fires, running and buffered fires, and its last fire",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			sc, err := c.GetSchedule(ctx, args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), sc)
			}
			return printSchedule(cmd.OutOrStdout(), sc)
		}),
	}
}

// printSchedule prints every field of a schedule, then its fires.
func printSchedule(out io.Writer, sc *client.Schedule) error {
	orNone := func(s string) string { return cmp.Or(s, "-") }
	optTime := func(t *time.Time) string {
		if t == nil {
			return "-"
		}
		return formatTime(*t)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 1, ' ', 0)
	for _, kv := range [][2]string{
		{"schedule_id", sc.ScheduleID},
		{"workflow", sc.Workflow},
		{"task_queue", sc.TaskQueue},
		{"input", compactJSON(sc.Input)},
		{"state", scheduleState(sc)},
		{"cron", orNone(strings.Join(sc.Spec.Cron, "; "))},
		{"every", orNone(sc.Spec.Every)},
		{"timezone", cmp.Or(sc.Spec.Timezone, "UTC")},
		{"start_at", optTime(sc.Spec.StartAt)},
		{"end_at", optTime(sc.Spec.EndAt)},
		{"jitter", orNone(sc.Spec.Jitter)},
		{"repeated_time", cmp.Or(sc.Spec.RepeatedTime, client.RepeatedTimeFirst)},
		{"overlap", sc.Overlap},
		{"catchup_window", sc.CatchupWindow},
		{"pause_on_failure", fmt.Sprint(sc.PauseOnFailure)},
		{"workflow_id_template", sc.WorkflowIDTemplate},
		{"source", sc.Source},
		{"created_at", formatTime(sc.CreatedAt)},
		{"updated_at", formatTime(sc.UpdatedAt)},
	} {
		fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
	}
	buffered := make([]string, 0, len(sc.Buffered))
	for _, b := range sc.Buffered {
		buffered = append(buffered, formatTime(b))
	}
	fmt.Fprintf(tw, "buffered:\t%s\n", orNone(strings.Join(buffered, ", ")))
	last := "-"
	if f := sc.LastFire; f != nil {
		last = fmt.Sprintf("%s %s %s", formatTime(f.NominalTime), f.Trigger, f.Outcome)
		if f.ExecutionID != "" {
			last += ", execution " + f.ExecutionID
		}
		if f.ExecutionStatus != "" {
			last += " " + f.ExecutionStatus
		}
		if e := fireError(*f); e != "-" {
			last += ": " + e
		}
	}
	fmt.Fprintf(tw, "last_fire:\t%s\n", last)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	if err := printNextFires(out, sc); err != nil {
		return err
	}
	if len(sc.Running) == 0 {
		return nil
	}
	fmt.Fprintln(out)
	return printFires(out, "RUNNING", sc.Running)
}

// fireError is a fire's error and message, "-" for none.
func fireError(f client.ScheduleFire) string {
	switch {
	case f.Error != "" && f.Message != "":
		return f.Error + ": " + f.Message
	case f.Error != "":
		return f.Error
	}
	return cmp.Or(f.Message, "-")
}

// printFires prints fires as a table, its first column headed first.
func printFires(out io.Writer, first string, fires []client.ScheduleFire) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "%s\tTRIGGER\tOUTCOME\tEXECUTION_ID\tSTATUS\tERROR\n", first)
	for _, f := range fires {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", formatTime(f.NominalTime), f.Trigger, f.Outcome,
			cmp.Or(f.ExecutionID, "-"), cmp.Or(f.ExecutionStatus, "-"), fireError(f))
	}
	return tw.Flush()
}

func newSchedulePause() *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:     "pause <schedule-id>",
		Short:   "Pause a schedule: the times that pass are recorded as paused, and start nothing",
		Example: `  harvest schedule pause nightly-report --note "the warehouse is down"`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.PauseSchedule(ctx, args[0], note)
			return printScheduleAction(cmd, r, err)
		}),
	}
	cmd.Flags().StringVar(&note, "note", "", "why, shown with the schedule")
	return cmd
}

func newScheduleUnpause() *cobra.Command {
	var note string
	cmd := &cobra.Command{
		Use:   "unpause <schedule-id>",
		Short: "Unpause a schedule: its next times fire, and the fires it buffered start",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.UnpauseSchedule(ctx, args[0], note)
			return printScheduleAction(cmd, r, err)
		}),
	}
	cmd.Flags().StringVar(&note, "note", "", "a note shown with the schedule (default: none, the pause's is cleared)")
	return cmd
}

func newScheduleTrigger() *cobra.Command {
	return &cobra.Command{
		Use:   "trigger <schedule-id>",
		Short: "Fire a schedule now, under its overlap policy, paused or not",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.TriggerSchedule(ctx, args[0])
			return printScheduleAction(cmd, r, err)
		}),
	}
}

func newScheduleBackfill() *cobra.Command {
	var start, end, overlap string
	cmd := &cobra.Command{
		Use:   "backfill <schedule-id>",
		Short: "Fire every time of a schedule's spec from --start to --end, now",
		Long: `Fire every nominal time of the schedule's spec from --start to --end (both
included, at most 1000), now, under --overlap (default: the schedule's).
A time that fired before starts nothing new: its fire is recorded
deduplicated, with the execution it started.`,
		Example: `  harvest schedule backfill nightly-report --start 2025-01-01T00:00:00Z --end 2025-01-07T23:59:59Z --overlap allow_all`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			from, err := parseTimeFlag("start", start)
			if err != nil {
				return err
			}
			to, err := parseTimeFlag("end", end)
			if err != nil {
				return err
			}
			if from == nil || to == nil {
				return errors.New("--start and --end are required")
			}
			r, err := c.BackfillSchedule(ctx, args[0], client.ScheduleBackfillRequest{Start: *from, End: *to, Overlap: overlap})
			return printScheduleAction(cmd, r, err)
		}),
	}
	cmd.Flags().StringVar(&start, "start", "", "the first nominal time to fire (RFC 3339; required)")
	cmd.Flags().StringVar(&end, "end", "", "the last nominal time to fire (RFC 3339; required)")
	cmd.Flags().StringVar(&overlap, "overlap", "", "the overlap policy of these fires (default: the schedule's)")
	return cmd
}

func newScheduleDelete() *cobra.Command {
	return &cobra.Command{
		Use:   "delete <schedule-id>",
		Short: "Delete a schedule and its ledger; the executions it started run on",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.DeleteSchedule(ctx, args[0])
			return printScheduleAction(cmd, r, err)
		}),
	}
}

// printScheduleAction prints what an action on a schedule did, and the
// nominal times it fired.
func printScheduleAction(cmd *cobra.Command, r *client.ScheduleActionResponse, err error) error {
	if err != nil {
		return err
	}
	if jsonOutput(cmd) {
		return printValue(cmd.OutOrStdout(), r)
	}
	out := cmd.OutOrStdout()
	switch n := len(r.Fires); {
	case n == 1:
		_, err = fmt.Fprintf(out, "%s schedule %s: fired %s\n", r.Action, r.ScheduleID, formatTime(r.Fires[0]))
	case n > 1:
		_, err = fmt.Fprintf(out, "%s schedule %s: fired %d times, %s to %s\n", r.Action, r.ScheduleID, n, formatTime(r.Fires[0]), formatTime(r.Fires[n-1]))
	case r.Action == "backfilled":
		_, err = fmt.Fprintf(out, "%s schedule %s: no time of its spec is in the range\n", r.Action, r.ScheduleID)
	default:
		_, err = fmt.Fprintf(out, "%s schedule %s\n", r.Action, r.ScheduleID)
	}
	return err
}

func newScheduleFires() *cobra.Command {
	var (
		opts client.ListFiresOptions
		all  bool
	)
	cmd := &cobra.Command{
		Use:   "fires <schedule-id>",
		Short: "Show a schedule's ledger of fires, newest first: what each nominal time did",
		Example: `  harvest schedule fires nightly-report --limit 20
  harvest schedule fires nightly-report --all --json`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			page, err := c.ScheduleFires(ctx, args[0], opts)
			if err != nil {
				return err
			}
			for all && page.NextCursor != "" {
				next, err := c.ScheduleFires(ctx, args[0], client.ListFiresOptions{Limit: opts.Limit, Cursor: page.NextCursor})
				if err != nil {
					return err
				}
				page.Fires, page.NextCursor = append(page.Fires, next.Fires...), next.NextCursor
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), page)
			}
			out := cmd.OutOrStdout()
			if err := printFires(out, "NOMINAL_TIME", page.Fires); err != nil {
				return err
			}
			return printNextPage(out, page.NextCursor)
		}),
	}
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many a page, 1 to 500 (default 100)")
	cmd.Flags().StringVar(&opts.Cursor, "cursor", "", "the page after the one that printed this cursor")
	cmd.Flags().BoolVar(&all, "all", false, "every page")
	return cmd
}
