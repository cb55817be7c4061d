package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

// workflowClient is the API client of a workflow subcommand, and the
// context its calls run under (bounded by --timeout).
func workflowClient(cmd *cobra.Command) (*client.Client, context.Context, context.CancelFunc, error) {
	return workflowClientHolding(cmd, 0)
}

// workflowClientHolding is workflowClient for a subcommand whose request
// the server may hold for up to hold (a state read's wait): its HTTP
// client waits that long more than client.DefaultTimeout.
func workflowClientHolding(cmd *cobra.Command, hold time.Duration) (*client.Client, context.Context, context.CancelFunc, error) {
	cfg := client.Config{BaseURL: apiAddr(cmd), Token: apiToken(cmd)}
	if hold > 0 {
		cfg.HTTPClient = &http.Client{Timeout: client.DefaultTimeout + hold}
	}
	c, err := client.New(cfg)
	if err != nil {
		return nil, nil, nil, err
	}
	parent := cmd.Context()
	if parent == nil {
		parent = context.Background()
	}
	if timeout, _ := cmd.Flags().GetDuration("timeout"); timeout > 0 {
		ctx, cancel := context.WithTimeout(parent, timeout)
		return c, ctx, cancel, nil
	}
	ctx, cancel := context.WithCancel(parent)
	return c, ctx, cancel, nil
}

func jsonOutput(cmd *cobra.Command) bool {
	on, _ := cmd.Flags().GetBool("json")
	return on
}

// printJSON writes raw JSON, indented, to the command's output.
func printJSON(w io.Writer, raw []byte) error {
	var pretty bytes.Buffer
	if err := json.Indent(&pretty, raw, "", "  "); err != nil {
		return err
	}
	pretty.WriteByte('\n')
	_, err := w.Write(pretty.Bytes())
	return err
}

// printValue writes v as JSON, indented (printJSON), to w.
func printValue(w io.Writer, v any) error {
	raw, err := json.Marshal(v)
	if err != nil {
		return err
	}
	return printJSON(w, raw)
}

// parseInput reads a --input flag: empty is no input.
func parseInput(flag, s string) (json.RawMessage, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	if !json.Valid([]byte(s)) {
		return nil, fmt.Errorf("--%s is not JSON: %s", flag, s)
	}
	return json.RawMessage(s), nil
}

func newWorkflow() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "workflow",
		Short: "Start, signal, cancel and inspect workflow executions through the HTTP API",
		Long: `Talk to a running Harvest (harvest dev, or ingest) through its HTTP API.
Starts and signals given --idempotency-key are idempotent: repeating one
answers with the first one's execution or delivery. Cancelling or
terminating an execution that has closed changes nothing.`,
	}
	addClientFlags(cmd, time.Minute, "give up after this long, waiting for a late outcome included (0: no limit)")
	cmd.AddCommand(newWorkflowStart(), newWorkflowSignal(), newWorkflowDescribe(), newWorkflowHistory(), newWorkflowResult(), newWorkflowList(),
		newWorkflowCount(), newWorkflowSignalWithStart(), newWorkflowCancel(), newWorkflowTerminate(), newWorkflowReset(), newWorkflowVersions(), newWorkflowHistories(), newWorkflowState(), newWorkflowUpdate(), newWorkflowChildren(),
		newWorkflowConcurrency())
	return cmd
}

func newWorkflowVersions() *cobra.Command {
	return &cobra.Command{
		Use:   "versions <workflow>",
		Short: "Show which code a workflow's open executions run: by build, and by the version each recorded of each change",
		Long: `Show a workflow's open executions by the build that ran their last
workflow task, and by the version each recorded of each change
(harvest.GetVersion). A build or a branch can be retired once no open
execution has it. An execution that recorded no version of a change is
"unrecorded": it went past the change before it was deployed, or has
not reached it yet.`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			v, err := c.WorkflowVersions(ctx, args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), v)
			}
			out := cmd.OutOrStdout()
			fmt.Fprintf(out, "%s: %d open\n\n", v.Workflow, v.Open)
			tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "BUILD\tOPEN")
			for _, b := range v.Builds {
				fmt.Fprintf(tw, "%s\t%d\n", cmp.Or(b.BuildID, "(none yet)"), b.Open)
			}
			if len(v.Changes) > 0 {
				fmt.Fprintln(tw, "\t")
				fmt.Fprintln(tw, "CHANGE\tVERSION\tOPEN")
				for _, ch := range v.Changes {
					for _, n := range ch.Versions {
						fmt.Fprintf(tw, "%s\t%d\t%d\n", ch.ChangeID, n.Version, n.Open)
					}
					fmt.Fprintf(tw, "%s\tunrecorded\t%d\n", ch.ChangeID, ch.Unrecorded)
				}
			}
			return tw.Flush()
		}),
	}
}

func newWorkflowStart() *cobra.Command {
	var input, key, workflowID, reusePolicy, taskQueue, versioning, buildID, startPolicy string
	var delay, runTimeout, executionTimeout time.Duration
	var priority int
	var wait bool
	var attrs []string
	cmd := &cobra.Command{
		Use:   "start <workflow>",
		Short: "Start a workflow execution",
		Example: `  harvest workflow start onboarding --input '{"user_id": 42}' --idempotency-key webhook-evt-abc123
  harvest workflow start charge --input '{"amount_cents": 500, "customer_id": "cus_1"}' --workflow-id order-1
  harvest workflow start approve_order --input '{"order_id": "o-1"}' --task-queue mine
  harvest workflow start refund --input '{"order_id": "o-1"}' --priority 5
  harvest workflow start charge --input '{"amount_cents": 500, "customer_id": "cus_1"}' --search-attribute customer_id=cus_1 --search-attribute amount_cents=500
  harvest workflow start charge --input '{"amount_cents": 500, "customer_id": "cus_1"}' --start-policy '{"concurrency": {"limit": 2, "key": "/customer_id"}}'`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			in, err := parseInput("input", input)
			if err != nil {
				return err
			}
			var inArg any
			if in != nil {
				inArg = in
			}
			policy, err := parseStartPolicy(startPolicy)
			if err != nil {
				return err
			}
			searchAttrs, err := parseSearchAttributes(attrs)
			if err != nil {
				return err
			}
			r, err := c.Start(ctx, args[0], inArg, client.StartOptions{
				IdempotencyKey: key, WorkflowID: workflowID, ReusePolicy: reusePolicy, Delay: delay, TaskQueue: taskQueue,
				Versioning: versioning, BuildID: buildID, RunTimeout: runTimeout, ExecutionTimeout: executionTimeout,
				StartPolicy: policy, Priority: priority, SearchAttributes: searchAttrs,
			})
			if err != nil {
				return err
			}
			if wait {
				return printResult(ctx, c, cmd, r.ExecutionID)
			}
			if jsonOutput(cmd) {
				return printJSON(cmd.OutOrStdout(), r.Raw)
			}
			how := "existing"
			switch {
			case r.StartedFresh:
				how = "fresh"
			case r.Deduplicated:
				how = "deduplicated"
			}
			if r.Status == client.StatusPending {
				how += ", Pending: it waits for a concurrency slot"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "started execution %s (workflow %s, workflow_id %s) %s\n", r.ExecutionID, r.WorkflowName, r.WorkflowID, how)
			return err
		}),
	}
	cmd.Flags().StringVar(&input, "input", "", "the workflow's input, as JSON")
	cmd.Flags().BoolVar(&wait, "wait", false, "wait for the execution to close and print its result (as harvest workflow result)")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "make the start idempotent under this key")
	cmd.Flags().StringVar(&workflowID, "workflow-id", "", "the execution's business id (default: minted)")
	cmd.Flags().StringVar(&reusePolicy, "reuse-policy", "", "allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running")
	cmd.Flags().DurationVar(&delay, "delay", 0, "run the first workflow task after this long")
	cmd.Flags().StringVar(&taskQueue, "task-queue", "", "the task queue the execution's tasks go to (default: the workflow's configured one, else default)")
	cmd.Flags().StringVar(&versioning, "versioning", "", "pinned (stay on one build) or auto_upgrade (move to the newest build); default: the workflow's configured one, else auto_upgrade")
	cmd.Flags().StringVar(&buildID, "build-id", "", "pin the execution to this build, which a live worker must run")
	cmd.Flags().DurationVar(&runTimeout, "run-timeout", 0, "close the run TimedOut if it has not closed this long after it begins (default: the workflow's run_timeout, else none)")
	cmd.Flags().DurationVar(&executionTimeout, "execution-timeout", 0, "close the execution TimedOut if its chain of continued runs has not closed by then (default: the workflow's execution_timeout, else none)")
	cmd.Flags().IntVar(&priority, "priority", 0, "the priority of the execution's tasks on their task queue, 1 (lowest) to 5 (highest); higher ones are taken first (default 3)")
	cmd.Flags().StringArrayVar(&attrs, "search-attribute", nil, searchAttributeUsage)
	cmd.Flags().StringVar(&startPolicy, "start-policy", "", `admit the start by this start policy instead of the workflow's configured one, as JSON: {"throttle": …}, {"debounce": …}, {"batch": …} or {"concurrency": {"limit": 2, "key": "/customer_id"}} (docs/start-policies.md)`)
	return cmd
}

// searchAttributeUsage is the --search-attribute flag's help.
const searchAttributeUsage = `a search attribute of the execution, NAME=VALUE: VALUE as JSON (500, true, "c_1"), else as a string (c_1); repeatable (docs/search-attributes.md)`

// parseSearchAttributes reads --search-attribute flags, NAME=VALUE each:
// a VALUE that is JSON is that value, another is a string.
func parseSearchAttributes(flags []string) (map[string]any, error) {
	if len(flags) == 0 {
		return nil, nil
	}
	out := make(map[string]any, len(flags))
	for _, f := range flags {
		name, value, ok := strings.Cut(f, "=")
		if !ok || name == "" {
			return nil, fmt.Errorf("--search-attribute %q: want NAME=VALUE", f)
		}
		var v any
		if json.Unmarshal([]byte(value), &v) != nil {
			v = value
		}
		out[name] = v
	}
	return out, nil
}

// parseStartPolicy reads a --start-policy flag: empty is none. A member
// the policy does not have is refused here, so that a misspelt one is not
// sent as a start with no policy.
func parseStartPolicy(s string) (*client.StartPolicy, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return nil, nil
	}
	dec := json.NewDecoder(strings.NewReader(s))
	dec.DisallowUnknownFields()
	var p client.StartPolicy
	if err := dec.Decode(&p); err != nil {
		return nil, fmt.Errorf("--start-policy: %w", err)
	}
	if dec.More() {
		return nil, errors.New("--start-policy: want one JSON object")
	}
	return &p, nil
}

func newWorkflowConcurrency() *cobra.Command {
	var key string
	cmd := &cobra.Command{
		Use:   "concurrency <workflow>",
		Short: "Show how many executions of a workflow run, and wait Pending, under a key of its concurrency start policy",
		Long: `Show how many executions of a workflow run, and how many wait Pending for a
slot, under one value of its concurrency start policy's key, and the
policy's limit (docs/start-policies.md). Without --key, the policy
without a key, which counts the whole workflow. A key no start used
shows 0 of everything.`,
		Example: `  harvest workflow concurrency charge --key cus_1`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.Concurrency(ctx, args[0], key)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "WORKFLOW\tKEY\tRUNNING\tPENDING\tLIMIT")
			fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.Workflow, shownConcurrencyKey(r.Key), r.Running, r.Pending, r.Limit)
			return tw.Flush()
		}),
	}
	cmd.Flags().StringVar(&key, "key", "", "the value of the policy's key (the input's value at its JSON Pointer); empty: the policy without a key")
	return cmd
}

// shownConcurrencyKey is a concurrency key as the tables show it: the
// empty one, of a policy without a key, is named.
func shownConcurrencyKey(key string) string {
	return cmp.Or(key, "(none: the whole workflow)")
}

func newWorkflowSignal() *cobra.Command {
	var input, key string
	cmd := &cobra.Command{
		Use:     "signal <execution-id> <signal>",
		Short:   "Send a signal to a running execution",
		Example: `  harvest workflow signal 01a2… item --input '{"n": 1}' --idempotency-key evt-1`,
		Args:    cobra.ExactArgs(2),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			payload, err := parseInput("input", input)
			if err != nil {
				return err
			}
			var payloadArg any
			if payload != nil {
				payloadArg = payload
			}
			delivered := true
			if key != "" {
				delivered, err = c.SendSignalIdempotent(ctx, args[0], args[1], payloadArg, key)
			} else {
				err = c.SendSignal(ctx, args[0], args[1], payloadArg)
			}
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				raw, _ := json.Marshal(map[string]any{"ok": true, "signal_delivered": delivered})
				return printJSON(cmd.OutOrStdout(), raw)
			}
			msg := "signal delivered"
			if !delivered {
				msg = "signal already delivered (deduplicated)"
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), msg)
			return err
		}),
	}
	cmd.Flags().StringVar(&input, "input", "", "the signal's payload, as JSON")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "deliver the signal once under this key")
	return cmd
}

func newWorkflowUpdate() *cobra.Command {
	var input, key string
	var accepted bool
	cmd := &cobra.Command{
		Use:   "update <execution-id> <update>",
		Short: "Ask a running execution for an update (harvest.SetUpdateHandler) and print its answer",
		Long: `Ask a running execution for an update, which its workflow's handler
answers (harvest.SetUpdateHandler), and print the update as JSON once it
has its answer: status completed with the handler's result, or failed
with its error. A refusal is an error: update_rejected (the validator
refused it; nothing was recorded), update_not_found (no handler of the
name), execution_closed, update_limit. Given --idempotency-key, asking
again is the same update, answered with its answer. With --accepted,
print it once the workflow accepted it, before the handler answers.`,
		Example: `  harvest workflow update 01a2… add --input 5 --idempotency-key add-1`,
		Args:    cobra.ExactArgs(2),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			payload, err := parseInput("input", input)
			if err != nil {
				return err
			}
			var payloadArg any
			if payload != nil {
				payloadArg = payload
			}
			u, err := c.Update(ctx, args[0], args[1], payloadArg, client.UpdateOptions{IdempotencyKey: key, WaitAccepted: accepted})
			if err != nil {
				return err
			}
			return printValue(cmd.OutOrStdout(), u)
		}),
	}
	cmd.Flags().StringVar(&input, "input", "", "the update's arguments, as JSON")
	cmd.Flags().StringVar(&key, "idempotency-key", "", "ask for the update once under this key")
	cmd.Flags().BoolVar(&accepted, "accepted", false, "print the update once the workflow accepted it, before its handler answers")
	return cmd
}

func newWorkflowDescribe() *cobra.Command {
	return &cobra.Command{
		Use:   "describe <execution-id>",
		Short: "Show an execution",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			e, err := c.Describe(ctx, args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd.OutOrStdout(), e.Raw)
			}
			closed := "-"
			if e.ClosedAt != nil {
				closed = formatTime(*e.ClosedAt)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 1, ' ', 0)
			for _, kv := range [][2]string{
				{"execution_id", e.ExecutionID},
				{"workflow_name", e.WorkflowName},
				{"workflow_id", e.WorkflowID},
				{"status", describeStatus(e.Status, e.CancelRequestedAt)},
				{"task_queue", e.TaskQueue},
				{"priority", strconv.Itoa(e.Priority)},
				{"input", compactJSON(e.Input)},
				{"result", compactJSON(e.Result)},
				{"error", compactJSON(e.Error)},
				{"created_at", formatTime(e.CreatedAt)},
				{"updated_at", formatTime(e.UpdatedAt)},
				{"closed_at", closed},
				{"history", fmt.Sprintf("%d events, %d bytes", e.HistoryLength, e.HistoryBytes)},
			} {
				fmt.Fprintf(tw, "%s:\t%s\n", kv[0], kv[1])
			}
			if e.WaitingFor != "" {
				fmt.Fprintf(tw, "waiting_for:\t%s\n", e.WaitingFor)
			}
			if e.ConcurrencyKey != nil {
				fmt.Fprintf(tw, "concurrency_key:\t%s\n", shownConcurrencyKey(*e.ConcurrencyKey))
			}
			if e.ContinuedFrom != "" {
				fmt.Fprintf(tw, "continued_from:\t%s\n", e.ContinuedFrom)
			}
			if e.ParentExecutionID != "" {
				fmt.Fprintf(tw, "parent:\t%s\n", e.ParentExecutionID)
			}
			if e.RunDeadline != nil {
				fmt.Fprintf(tw, "run_deadline:\t%s\n", formatTime(*e.RunDeadline))
			}
			if e.ExecutionDeadline != nil {
				fmt.Fprintf(tw, "execution_deadline:\t%s\n", formatTime(*e.ExecutionDeadline))
			}
			if e.ContinuedAs != "" {
				fmt.Fprintf(tw, "continued_as:\t%s\n", e.ContinuedAs)
			}
			if e.Versioning != "" {
				fmt.Fprintf(tw, "versioning:\t%s, build %s\n", e.Versioning, cmp.Or(e.PinnedBuild, "- (its first workflow task's)"))
			}
			if f := e.TaskFailing; f != nil {
				fmt.Fprintf(tw, "task_failing:\t%s since %s, %d attempt(s), next at %s, build %s: %s\n",
					f.Reason, formatTime(f.Since), f.Attempts, formatTime(f.NextAttemptAt), cmp.Or(f.BuildID, "-"), f.Message)
			}
			if w := e.HistoryWarning; w != nil {
				fmt.Fprintf(tw, "history_warning:\t%s\n", w.Message)
			}
			describeMore(tw, e)
			return tw.Flush()
		}),
	}
}

// describeMore writes the fields of describe's answer beyond the
// execution's own: where it came from, its key and claim, its signal keys,
// its callback, its search attributes, what it waits for.
func describeMore(tw io.Writer, e *client.Execution) {
	if e.StartedBy != "" {
		fmt.Fprintf(tw, "started_by:\t%s\n", e.StartedBy)
	}
	if e.ResetFrom != "" {
		fmt.Fprintf(tw, "reset_from:\t%s, at event %d of its history\n", e.ResetFrom, e.ResetPoint)
	}
	if e.ResetTo != "" {
		fmt.Fprintf(tw, "reset_to:\t%s\n", e.ResetTo)
	}
	if e.IdempotencyKey != "" {
		fmt.Fprintf(tw, "idempotency_key:\t%s\n", e.IdempotencyKey)
	}
	if c := e.IdempotencyClaim; c != nil {
		state := "until " + formatTime(c.ExpiresAt)
		if c.Expired {
			state = "expired " + formatTime(c.ExpiresAt)
		}
		fmt.Fprintf(tw, "claim:\tfirst seen %s, %s; duplicates: %d replayed, %d by the broker, %d by the claim\n",
			formatTime(c.FirstSeenAt), state, c.Duplicates.Replay, c.Duplicates.Broker, c.Duplicates.Claim)
	}
	for _, k := range e.SignalKeys {
		fmt.Fprintf(tw, "signal_key:\t%s, received %s, %d duplicate(s) dropped\n", k.IdempotencyKey, formatTime(k.ReceivedAt),
			k.Duplicates.Replay+k.Duplicates.Broker+k.Duplicates.Claim)
	}
	if cb := e.CompletionCallback; cb != nil {
		line := fmt.Sprintf("%s: %s, %d attempt(s)", cb.URL, cb.Status, cb.Attempts)
		if cb.LastError != "" {
			line += ", last error: " + cb.LastError
		}
		fmt.Fprintf(tw, "completion_callback:\t%s\n", line)
	}
	for _, name := range slices.Sorted(maps.Keys(e.SearchAttributes)) {
		raw, _ := json.Marshal(e.SearchAttributes[name])
		fmt.Fprintf(tw, "search_attribute:\t%s = %s\n", name, raw)
	}
	if w := e.WaitingOn; w != nil {
		for _, wait := range w.Waits {
			fmt.Fprintf(tw, "waiting_on:\t%s: %s (as of event %d)\n", wait.Goroutine, wait, w.Seq)
		}
	}
	if e.WaitingForWorker {
		fmt.Fprintf(tw, "waiting_for_worker:\tno live worker serves its workflow on its task queue\n")
	}
	for _, wf := range e.WaitingForWorkers {
		what := wf.Kind + " " + wf.Name + " on task queue " + wf.TaskQueue
		if wf.BuildID != "" {
			what += ", build " + wf.BuildID
		}
		fmt.Fprintf(tw, "waiting_for_workers:\t%s\n", what)
	}
}

func newWorkflowResult() *cobra.Command {
	return &cobra.Command{
		Use:   "result <execution-id>",
		Short: "Wait for an execution to close and print its result (a chain of continued runs: its last run's)",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			return printResult(ctx, c, cmd, args[0])
		}),
	}
}

// printResult waits for execution id to close and prints its result
// (its last run's, for a chain), or says how it failed.
func printResult(ctx context.Context, c *client.Client, cmd *cobra.Command, id string) error {
	e, err := c.WaitResult(ctx, id, nil)
	var failed *client.ExecutionFailedError
	if errors.As(err, &failed) {
		return fmt.Errorf("execution %s closed %s: %s", failed.ExecutionID, failed.Status, compactJSON(e.Error))
	}
	if err != nil {
		return err
	}
	if jsonOutput(cmd) {
		return printJSON(cmd.OutOrStdout(), e.Raw)
	}
	_, err = fmt.Fprintln(cmd.OutOrStdout(), compactJSON(e.Result))
	return err
}

func newWorkflowSignalWithStart() *cobra.Command {
	var (
		opts                  client.SignalWithStartOptions
		input, payload, prior string
		attrs                 []string
	)
	cmd := &cobra.Command{
		Use:   "signal-with-start <workflow> <signal>",
		Short: "Signal the running execution of a workflow_id, or start one with the signal, atomically",
		Long: `Send <signal> to the running execution of --workflow-id, or start an
execution of <workflow> with --input and deliver the signal to it, in one
command (docs/signals.md). --idempotency-key makes the signal land once.`,
		Example: `  harvest workflow signal-with-start collect item --workflow-id order-42 --input '{"count": 3}' --payload '{"sku": "a"}' --idempotency-key evt-1`,
		Args:    cobra.ExactArgs(2),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			in, err := parseInput("input", input)
			if err != nil {
				return err
			}
			pl, err := parseInput("payload", payload)
			if err != nil {
				return err
			}
			if in != nil {
				opts.Input = in
			}
			if pl != nil {
				opts.SignalPayload = pl
			}
			opts.SignalName, opts.ReusePolicy = args[1], prior
			if opts.SearchAttributes, err = parseSearchAttributes(attrs); err != nil {
				return err
			}
			r, err := c.SignalWithStart(ctx, args[0], opts)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printJSON(cmd.OutOrStdout(), r.Raw)
			}
			how := "the running execution"
			if r.StartedFresh {
				how = "a new execution"
			}
			delivered := "signal delivered to"
			if !r.SignalDelivered {
				delivered = "signal already delivered (deduplicated) to"
			}
			_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s %s %s (workflow %s, workflow_id %s): %s\n", delivered, how, r.ExecutionID, r.WorkflowName, r.WorkflowID, r.Status)
			return err
		}),
	}
	cmd.Flags().StringVar(&opts.WorkflowID, "workflow-id", "", "the workflow_id to signal, or start (required)")
	cmd.Flags().StringVar(&input, "input", "", "the input of the execution, if one starts, as JSON")
	cmd.Flags().StringVar(&payload, "payload", "", "the signal's payload, as JSON")
	cmd.Flags().StringVar(&opts.IdempotencyKey, "idempotency-key", "", "the signal lands once under this key")
	cmd.Flags().StringVar(&prior, "reuse-policy", "", "allow_duplicate, allow_duplicate_failed_only, reject_duplicate or terminate_if_running, if one starts")
	cmd.Flags().StringVar(&opts.TaskQueue, "task-queue", "", "the task queue of the execution, if one starts")
	cmd.Flags().StringArrayVar(&attrs, "search-attribute", nil, searchAttributeUsage+", if one starts")
	_ = cmd.MarkFlagRequired("workflow-id")
	return cmd
}

func newWorkflowState() *cobra.Command {
	var afterSeq int
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "state <execution-id> [name]",
		Short: "Print a query state of an execution (harvest.SetQueryState), or all of them; wait for a newer value with --after-seq and --wait",
		Long: `Print the latest value of a query state the execution's workflow code set
(harvest.SetQueryState), as JSON with the seq of the history event it
reflects; without a name, every state of the execution. It is read from
PostgreSQL: no worker needs to run, and a closed execution keeps its
states. With --wait, wait up to then (at most 60s) for a value whose seq
is greater than --after-seq (0: for the state to be set), and print the
value there is at the end either way.`,
		Example: `  harvest workflow state 01a2… progress
  harvest workflow state 01a2… progress --after-seq 12 --wait 30s
  harvest workflow state 01a2…`,
		Args: cobra.RangeArgs(1, 2),
		RunE: func(cmd *cobra.Command, args []string) error {
			c, ctx, cancel, err := workflowClientHolding(cmd, wait)
			if err != nil {
				return err
			}
			defer cancel()
			var v any
			if len(args) == 1 {
				v, err = c.States(ctx, args[0])
			} else {
				v, err = c.State(ctx, args[0], args[1], client.StateOptions{AfterSeq: afterSeq, Wait: wait})
			}
			if err != nil {
				return unreachable(apiAddr(cmd), apiHint, err)
			}
			return printValue(cmd.OutOrStdout(), v)
		},
	}
	cmd.Flags().IntVar(&afterSeq, "after-seq", 0, "with --wait, wait for a value whose seq is greater than this (the seq of the value you have)")
	cmd.Flags().DurationVar(&wait, "wait", 0, "wait up to this long for a newer value (at most 60s)")
	return cmd
}

func newWorkflowHistory() *cobra.Command {
	var follow bool
	cmd := &cobra.Command{
		Use:     "history <execution-id>",
		Aliases: []string{"show"},
		Short:   "Show an execution's history; --follow prints its events as they come until it closes",
		Long: `Show an execution's history, one event a line. --follow keeps printing
the events that follow, as they are recorded, until the execution (a
chain of continued or reset runs: its newest run) closes; --json then
prints one event a line.`,
		Example: `  harvest workflow show 01a2… --follow`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			events, err := c.History(ctx, args[0])
			if err != nil {
				return err
			}
			if !follow {
				if jsonOutput(cmd) {
					return printRawList(cmd, "events", events, func(ev client.Event) json.RawMessage { return ev.Raw })
				}
				return printEvents(cmd, events, true)
			}
			return followHistory(ctx, c, cmd, args[0], events)
		}),
	}
	cmd.Flags().BoolVar(&follow, "follow", false, "print the events that follow as they come, until the execution closes")
	return cmd
}

// printEvents prints events, a line each: a table (with its header when
// header says), or one JSON event a line with --json.
func printEvents(cmd *cobra.Command, events []client.Event, header bool) error {
	if jsonOutput(cmd) {
		for _, ev := range events {
			var b bytes.Buffer
			if err := json.Compact(&b, ev.Raw); err != nil {
				return err
			}
			if _, err := fmt.Fprintln(cmd.OutOrStdout(), b.String()); err != nil {
				return err
			}
		}
		return nil
	}
	tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
	if header {
		fmt.Fprintln(tw, "SEQ\tTYPE\tAT\tDETAILS")
	}
	for _, ev := range events {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", ev.Seq, ev.Type, formatTime(ev.At), details(ev.Attrs))
	}
	return tw.Flush()
}

// followHistory prints the events of execution id after those printed
// (seen), as they come, until it closes; a run that continues as new or
// is reset is followed into its next run.
func followHistory(ctx context.Context, c *client.Client, cmd *cobra.Command, id string, seen []client.Event) error {
	if err := printEvents(cmd, seen, true); err != nil {
		return err
	}
	last := 0
	if n := len(seen); n > 0 {
		last = seen[n-1].Seq
	}
	for {
		e, err := c.Describe(ctx, id)
		if err != nil {
			return err
		}
		if e.HistoryLength > last {
			events, err := c.History(ctx, id)
			if err != nil {
				return err
			}
			var fresh []client.Event
			for _, ev := range events {
				if ev.Seq > last {
					fresh = append(fresh, ev)
				}
			}
			if err := printEvents(cmd, fresh, false); err != nil {
				return err
			}
			if n := len(events); n > 0 {
				last = events[n-1].Seq
			}
			continue // read again: more may have come, and the status with them
		}
		next := cmp.Or(e.ContinuedAs, e.ResetTo)
		switch {
		case next != "":
			if !jsonOutput(cmd) {
				fmt.Fprintf(cmd.OutOrStdout(), "-- %s: the run goes on as %s\n", e.Status, next)
			}
			id, last = next, 0
			continue
		case e.Status != client.StatusRunning && e.Status != client.StatusPending:
			return nil
		}
		t := time.NewTimer(500 * time.Millisecond)
		select {
		case <-ctx.Done():
			t.Stop()
			return ctx.Err()
		case <-t.C:
		}
	}
}

func newWorkflowList() *cobra.Command {
	var (
		opts client.ListOptions
		f    listFlags
		all  bool
	)
	cmd := &cobra.Command{
		Use:   "list",
		Short: "List executions, newest first, a page at a time",
		Long: `List executions, newest first, that every filter given matches. A page
holds --limit of them; the next page is --cursor with the cursor the last
one printed, or --all reads every page. --attr filters on a search
attribute (docs/search-attributes.md): NAME=VALUE, or NAME.gt=, .gte=,
.lt=, .lte= for a bound.`,
		Example: `  harvest workflow list --workflow checkout --status Failed --created-after 2026-12-07T09:00:00Z
  harvest workflow list --attr customer_id=c_1 --attr amount.gte=500 --all --json`,
		Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := f.apply(&opts); err != nil {
				return err
			}
			page, err := c.ListPage(ctx, opts)
			if err != nil {
				return err
			}
			for all && page.NextCursor != "" {
				next := opts
				next.Cursor = page.NextCursor
				more, err := c.ListPage(ctx, next)
				if err != nil {
					return err
				}
				page.Executions, page.NextCursor = append(page.Executions, more.Executions...), more.NextCursor
			}
			if jsonOutput(cmd) {
				raws := make([]json.RawMessage, 0, len(page.Executions))
				for _, e := range page.Executions {
					raws = append(raws, e.Raw)
				}
				out := map[string]any{"executions": raws}
				if page.NextCursor != "" {
					out["next_cursor"] = page.NextCursor
				}
				return printValue(cmd.OutOrStdout(), out)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "EXECUTION_ID\tWORKFLOW\tWORKFLOW_ID\tSTATUS\tCREATED_AT")
			for _, e := range page.Executions {
				status := e.Status
				switch {
				case status == client.StatusRunning && e.CancelRequestedAt != nil:
					status += " (cancel requested)"
				case status == client.StatusPending && e.WaitingFor == client.WaitingForConcurrency && e.ConcurrencyKey != nil:
					status += " (concurrency, key " + shownConcurrencyKey(*e.ConcurrencyKey) + ")"
				}
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.ExecutionID, e.WorkflowName, e.WorkflowID, status, formatTime(e.CreatedAt))
			}
			if err := tw.Flush(); err != nil {
				return err
			}
			return printNextPage(cmd.OutOrStdout(), page.NextCursor)
		}),
	}
	f.add(cmd, &opts)
	cmd.Flags().IntVar(&opts.Limit, "limit", 0, "at most this many a page, 1 to 500 (default 50)")
	cmd.Flags().StringVar(&opts.Cursor, "cursor", "", "the page after the one that printed this cursor")
	cmd.Flags().BoolVar(&all, "all", false, "every page")
	return cmd
}

func newWorkflowCount() *cobra.Command {
	var (
		opts client.ListOptions
		f    listFlags
	)
	cmd := &cobra.Command{
		Use:     "count",
		Short:   "Count the executions that every filter given matches, across the stores",
		Example: `  harvest workflow count --workflow checkout --status Failed --attr customer_id=c_1`,
		Args:    cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			if err := f.apply(&opts); err != nil {
				return err
			}
			n, err := c.Count(ctx, opts)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), client.CountExecutionsResponse{Count: n})
			}
			_, err = fmt.Fprintln(cmd.OutOrStdout(), n)
			return err
		}),
	}
	f.add(cmd, &opts)
	return cmd
}

// listFlags are the filters list and count share, as flags.
type listFlags struct {
	createdAfter, createdBefore string
	attrs                       []string
}

func (f *listFlags) add(cmd *cobra.Command, opts *client.ListOptions) {
	fl := cmd.Flags()
	fl.StringVar(&opts.Workflow, "workflow", "", "only executions of this workflow")
	fl.StringVar(&opts.Status, "status", "", "only executions in this status: Pending, Running, Completed, Failed, Cancelled, Terminated, TimedOut or ContinuedAsNew")
	fl.StringVar(&opts.KeyPrefix, "key-prefix", "", "only executions whose start's idempotency key begins with this")
	fl.StringVar(&opts.WorkflowIDPrefix, "workflow-id-prefix", "", "only executions whose workflow_id begins with this")
	fl.StringVar(&f.createdAfter, "created-after", "", "only executions created at or after this RFC 3339 time")
	fl.StringVar(&f.createdBefore, "created-before", "", "only executions created before this RFC 3339 time")
	fl.StringArrayVar(&f.attrs, "attr", nil, "a search attribute filter, NAME=VALUE or NAME.OP=VALUE (OP: gt, gte, lt, lte); repeatable")
}

// apply puts the flags that need parsing into opts.
func (f *listFlags) apply(opts *client.ListOptions) error {
	for _, t := range []struct {
		flag, v string
		out     *time.Time
	}{{"--created-after", f.createdAfter, &opts.CreatedAfter}, {"--created-before", f.createdBefore, &opts.CreatedBefore}} {
		if t.v == "" {
			continue
		}
		at, err := time.Parse(time.RFC3339Nano, t.v)
		if err != nil {
			return fmt.Errorf("%s %q: want an RFC 3339 time such as 2026-12-07T10:00:00Z", t.flag, t.v)
		}
		*t.out = at
	}
	for _, a := range f.attrs {
		name, value, ok := strings.Cut(a, "=")
		if !ok || name == "" {
			return fmt.Errorf("--attr %q: want NAME=VALUE or NAME.OP=VALUE", a)
		}
		if opts.SearchAttributes == nil {
			opts.SearchAttributes = map[string]string{}
		}
		opts.SearchAttributes[name] = value
	}
	return nil
}

func newWorkflowCancel() *cobra.Command {
	var (
		reason string
		grace  time.Duration
	)
	cmd := &cobra.Command{
		Use:   "cancel <execution-id>",
		Short: "Ask a running execution to cancel: its workflow code is told, cleans up and closes it as Cancelled",
		Long: `Ask a running execution to cancel (docs/cancellation.md). Its workflow code is
told at its next workflow task: the activities and timers it waits for are
given up (their contexts cancelled), it may run cleanup in a disconnected
context, and its return closes the execution as Cancelled. An execution
whose code never ran closes at once. Asking again changes nothing.
--grace bounds how long the code may take: the execution is terminated if
it is still running then.`,
		Example: `  harvest workflow cancel 01a2… --reason "customer left" --grace 5m`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			var r *client.CloseResult
			var err error
			if grace > 0 {
				r, err = c.CancelWithGrace(ctx, args[0], reason, grace)
			} else {
				r, err = c.Cancel(ctx, args[0], reason)
			}
			if err != nil {
				return err
			}
			if r.CancelRequested && !jsonOutput(cmd) {
				_, err = fmt.Fprintf(cmd.OutOrStdout(), "cancel requested for execution %s (workflow %s, workflow_id %s): %s, its workflow code closes it\n",
					r.ExecutionID, r.WorkflowName, r.WorkflowID, r.Status)
				return err
			}
			return printClosed(cmd, r, "cancelled", client.StatusCancelled)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why, recorded in the WorkflowCancelRequested event (default "cancelled")`)
	cmd.Flags().DurationVar(&grace, "grace", 0, "terminate the execution if its code has not closed it this long after the request (default: the workflow's cancel_grace, else no bound)")
	return cmd
}

// describeStatus is an execution's status as describe and list show it: a
// running one asked to cancel says so.
func describeStatus(status string, cancelRequestedAt *time.Time) string {
	if status == client.StatusRunning && cancelRequestedAt != nil {
		return status + " (cancel requested at " + formatTime(*cancelRequestedAt) + ")"
	}
	return status
}

func newWorkflowTerminate() *cobra.Command {
	var reason string
	cmd := &cobra.Command{
		Use:   "terminate <execution-id>",
		Short: "Terminate a running execution: it closes as Terminated at once, without its workflow code running again",
		Long: `Terminate a running execution: it closes as Terminated at once, its workflow
code is not run again, its pending activities and timers are abandoned and
its running activities' contexts are cancelled. Use cancel for the ordinary
stop; terminate is for an execution that cannot be let run.`,
		Example: `  harvest workflow terminate 01a2… --reason "stuck on a bad deploy"`,
		Args:    cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.Terminate(ctx, args[0], reason)
			if err != nil {
				return err
			}
			return printClosed(cmd, r, "terminated", client.StatusTerminated)
		}),
	}
	cmd.Flags().StringVar(&reason, "reason", "", `why, recorded in the WorkflowTerminated event (default "terminated")`)
	return cmd
}

// printClosed prints the answer to a cancellation or termination: done
// names what was done, want the status it leads to; an execution that had
// closed otherwise is said to have.
func printClosed(cmd *cobra.Command, r *client.CloseResult, done, want string) error {
	if jsonOutput(cmd) {
		return printJSON(cmd.OutOrStdout(), r.Raw)
	}
	var err error
	if r.Status == want {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "%s execution %s (workflow %s, workflow_id %s): %s\n", done, r.ExecutionID, r.WorkflowName, r.WorkflowID, r.Status)
	} else {
		_, err = fmt.Fprintf(cmd.OutOrStdout(), "execution %s (workflow %s, workflow_id %s) had already closed: %s\n", r.ExecutionID, r.WorkflowName, r.WorkflowID, r.Status)
	}
	return err
}

func formatTime(t time.Time) string {
	return t.UTC().Format("2006-01-02T15:04:05.000Z")
}

// compactJSON shows a JSON value on one line; null or nothing is "-".
func compactJSON(raw json.RawMessage) string {
	if len(raw) == 0 || string(raw) == "null" {
		return "-"
	}
	var b bytes.Buffer
	if err := json.Compact(&b, raw); err != nil {
		return string(raw)
	}
	return b.String()
}

// details shows an event's attributes on one line, shortened.
func details(attrs map[string]any) string {
	if len(attrs) == 0 {
		return ""
	}
	raw, err := json.Marshal(attrs)
	if err != nil {
		return ""
	}
	const width = 100
	if s := []rune(string(raw)); len(s) > width {
		return string(s[:width-1]) + "…"
	}
	return string(raw)
}

// printRawList prints {"<field>": [the server's objects, as sent]}: raw
// is an item's object as the server sent it.
func printRawList[T any](cmd *cobra.Command, field string, items []T, raw func(T) json.RawMessage) error {
	raws := make([]json.RawMessage, 0, len(items))
	for _, it := range items {
		raws = append(raws, raw(it))
	}
	return printValue(cmd.OutOrStdout(), map[string]any{field: raws})
}

// withClient adapts a command that talks to the HTTP API: it gets the
// client of --addr and a context bounded by --timeout.
func withClient(run func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error) func(*cobra.Command, []string) error {
	return func(cmd *cobra.Command, args []string) error {
		c, ctx, cancel, err := workflowClient(cmd)
		if err != nil {
			return err
		}
		defer cancel()
		return unreachable(apiAddr(cmd), apiHint, run(ctx, c, cmd, args))
	}
}

func newWorkflowChildren() *cobra.Command {
	return &cobra.Command{
		Use:   "children <execution-id>",
		Short: "List the child workflows an execution started, with the execution and status of each",
		Args:  cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			r, err := c.Children(ctx, args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), r)
			}
			tw := tabwriter.NewWriter(cmd.OutOrStdout(), 0, 0, 2, ' ', 0)
			fmt.Fprintln(tw, "CHILD\tWORKFLOW\tWORKFLOW_ID\tEXECUTION_ID\tSTATUS\tPARENT_CLOSE_POLICY")
			for _, ch := range r.Children {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", ch.ChildID, ch.WorkflowName, ch.WorkflowID, cmp.Or(ch.ExecutionID, "-"), ch.Status, ch.ParentClosePolicy)
			}
			return tw.Flush()
		}),
	}
}
