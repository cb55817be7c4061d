package main

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/harvest-engine/harvest/client"
)

func newWorker() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "worker",
		Short: "See the live workers: who each is, its task queue, what it serves and how busy it is",
		Long: `A worker registers the workflows and activities it serves on its task queue
as it starts, renews that every third of worker_ttl (30 s by default) while
it lives, and removes it when it stops; one that vanishes is forgotten once
its registration lapses.`,
	}
	addClientFlags(cmd, 30*time.Second, "give up after this long (0: no limit)")
	cmd.AddCommand(newWorkerList())
	return cmd
}

func newWorkerList() *cobra.Command {
	return &cobra.Command{
		Use:   "list",
		Short: "List the live workers (GET /api/harvest/workers)",
		Long: `List the live workers by task queue, host and id: each one's pid, build,
start, slots in use of its workflow task and activity slots (at its last
heartbeat), last heartbeat, and the workflows and activities it registered.
A worker of a version before workers said who they are shows "-" for what
it does not say. A workflow a worker's replay check refused (its running
histories do not replay on the worker's code) is listed after the table,
with the execution and where it diverged.`,
		Example: `  harvest worker list
  harvest worker list --json`,
		Args: cobra.NoArgs,
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, _ []string) error {
			ws, err := c.Workers(ctx)
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), client.ListWorkersResponse{Workers: ws})
			}
			return printWorkers(cmd.OutOrStdout(), ws)
		}),
	}
}

// printWorkers prints one line per worker.
func printWorkers(w io.Writer, ws []client.Worker) error {
	if len(ws) == 0 {
		_, err := fmt.Fprintln(w, "no live worker: a worker is listed from its start until it stops, or until its registration lapses after it vanished")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "TASK_QUEUE\tHOST\tID\tPID\tBUILD\tSTARTED_AT\tWORKFLOW_SLOTS\tACTIVITY_SLOTS\tLAST_HEARTBEAT_AT\tWORKFLOWS\tACTIVITIES")
	for _, wk := range ws {
		pid, started, wfSlots, actSlots := "-", "-", "-", "-"
		if wk.PID != 0 {
			pid = strconv.Itoa(wk.PID)
		}
		if !wk.StartedAt.IsZero() {
			started = formatTime(wk.StartedAt)
		}
		if s := wk.Slots; s != nil {
			wfSlots = fmt.Sprintf("%d/%d", s.Workflow.Used, s.Workflow.Size)
			actSlots = fmt.Sprintf("%d/%d", s.Activity.Used, s.Activity.Size)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", wk.TaskQueue, orDash(wk.Host), wk.ID, pid, orDash(wk.Build), started,
			wfSlots, actSlots, formatTime(wk.LastHeartbeatAt), names(wk.Workflows), names(wk.Activities))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, wk := range ws {
		for _, r := range wk.ReplayRefused {
			if _, err := fmt.Fprintf(w, "worker %s (build %s) does not take workflow %s: execution %s does not replay on its code (%s): %s\n",
				wk.ID, orDash(wk.BuildID), r.Workflow, r.ExecutionID, r.Reason, r.Message); err != nil {
				return err
			}
		}
	}
	return nil
}

// names shows a list of names on one line; none is "-".
func names(list []string) string {
	if len(list) == 0 {
		return "-"
	}
	return strings.Join(list, ",")
}

func newTaskQueue() *cobra.Command {
	cmd := &cobra.Command{
		Use:   "task-queue",
		Short: "See a task queue: each workflow's and activity's backlog and the live workers that serve it",
	}
	addClientFlags(cmd, 30*time.Second, "give up after this long (0: no limit)")
	cmd.AddCommand(newTaskQueueShow())
	return cmd
}

func newTaskQueueShow() *cobra.Command {
	return &cobra.Command{
		Use:   "show <name>",
		Short: "Show a task queue's backlog and workers by workflow and activity (GET /api/harvest/task-queues/{name})",
		Long: `Show each workflow and activity of the task queue that has tasks waiting or
a live worker registered on it: its backlog (tasks in the task stream,
waiting for a worker or being run) and the ids of the live workers serving
it (harvest worker list tells who they are). A name with a backlog and no
worker is work waiting for a worker: start one that registers it on the
queue. The queue of most executions is "default".`,
		Example: `  harvest task-queue show default
  harvest task-queue show billing --json`,
		Args: cobra.ExactArgs(1),
		RunE: withClient(func(ctx context.Context, c *client.Client, cmd *cobra.Command, args []string) error {
			q, err := c.TaskQueue(ctx, args[0])
			if err != nil {
				return err
			}
			if jsonOutput(cmd) {
				return printValue(cmd.OutOrStdout(), q)
			}
			return printTaskQueue(cmd.OutOrStdout(), q)
		}),
	}
}

// printTaskQueue prints a line per name, then what waits for a worker.
func printTaskQueue(w io.Writer, q *client.TaskQueueResponse) error {
	if len(q.Workflows) == 0 && len(q.Activities) == 0 && q.UnroutedBacklog == (client.UnroutedBacklog{}) {
		_, err := fmt.Fprintf(w, "task queue %s: no tasks, and no live worker registered on it\n", q.TaskQueue)
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "KIND\tNAME\tBACKLOG\tWORKERS")
	var waiting []string
	for _, kind := range []struct {
		name string
		list []client.NameBacklog
	}{{"workflow", q.Workflows}, {"activity", q.Activities}} {
		for _, n := range kind.list {
			fmt.Fprintf(tw, "%s\t%s\t%d\t%s\n", kind.name, n.Name, n.Backlog, names(n.Workers))
			if n.Backlog > 0 && len(n.Workers) == 0 {
				waiting = append(waiting, fmt.Sprintf("%s %s: %s and no live worker; start a worker that registers it on task queue %s",
					kind.name, n.Name, tasksCount(n.Backlog), q.TaskQueue))
			}
		}
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if u := q.UnroutedBacklog; u != (client.UnroutedBacklog{}) {
		if _, err := fmt.Fprintf(w, "unrouted (written before tasks were routed by name, taken by any worker of the queue): %s of workflows, %s of activities\n",
			tasksCount(u.Workflow), tasksCount(u.Activity)); err != nil {
			return err
		}
	}
	for _, line := range waiting {
		if _, err := fmt.Fprintln(w, line); err != nil {
			return err
		}
	}
	return nil
}

func tasksCount(n int64) string {
	if n == 1 {
		return "1 task"
	}
	return fmt.Sprintf("%d tasks", n)
}
