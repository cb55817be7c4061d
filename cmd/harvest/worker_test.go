package main

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/wire"
)

// TestWorkerListAndTaskQueueShow: `harvest worker list` shows the stack's
// worker (this process) with what it serves, as a table or the server's
// JSON; `harvest task-queue show` shows a queue's names with their
// backlogs and workers, and says which name has tasks and no worker.
func TestWorkerListAndTaskQueueShow(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	ctx := natstest.Context(t)
	addr := []string{"--addr", s.URL()}

	out, _, err := runCLI(t, append([]string{"worker", "list", "--json"}, addr...)...)
	require.NoError(t, err)
	var list client.ListWorkersResponse
	require.NoError(t, json.Unmarshal([]byte(out), &list), out)
	require.Len(t, list.Workers, 1, out)
	w := list.Workers[0]
	require.Equal(t, os.Getpid(), w.PID, "the stack's worker runs in this process")
	require.Equal(t, wire.DefaultTaskQueue, w.TaskQueue)
	require.Contains(t, w.Workflows, "charge")
	require.NotEmpty(t, w.Activities)

	out, _, err = runCLI(t, append([]string{"worker", "list"}, addr...)...)
	require.NoError(t, err)
	require.Regexp(t, `^TASK_QUEUE +HOST +ID +PID +BUILD +STARTED_AT +WORKFLOW_SLOTS +ACTIVITY_SLOTS +LAST_HEARTBEAT_AT +WORKFLOWS +ACTIVITIES\n`, out)
	require.Regexp(t, regexp.MustCompile(`(?m)^default +\S+ +`+w.ID+` +`+strconv.Itoa(os.Getpid())+` .*charge`), out)

	out, _, err = runCLI(t, append([]string{"task-queue", "show", wire.DefaultTaskQueue, "--json"}, addr...)...)
	require.NoError(t, err)
	var q client.TaskQueueResponse
	require.NoError(t, json.Unmarshal([]byte(out), &q), out)
	i := slices.IndexFunc(q.Workflows, func(n client.NameBacklog) bool { return n.Name == "charge" })
	require.GreaterOrEqual(t, i, 0, out)
	require.Equal(t, []string{w.ID}, q.Workflows[i].Workers)

	// A queue no worker serves, with a task waiting.
	_, err = s.Topology.JS.Publish(ctx, broker.NameTaskSubject("cli_queue", wire.TaskWorkflow, "lonely"), []byte("{}"))
	require.NoError(t, err)
	out, _, err = runCLI(t, append([]string{"task-queue", "show", "cli_queue"}, addr...)...)
	require.NoError(t, err)
	require.Equal(t, "KIND      NAME    BACKLOG  WORKERS\n"+
		"workflow  lonely  1        -\n"+
		"workflow lonely: 1 task and no live worker; start a worker that registers it on task queue cli_queue\n", out)
	out, _, err = runCLI(t, append([]string{"task-queue", "show", "empty_queue"}, addr...)...)
	require.NoError(t, err)
	require.Equal(t, "task queue empty_queue: no tasks, and no live worker registered on it\n", out)
	_, _, err = runCLI(t, append([]string{"task-queue", "show", "no.such"}, addr...)...)
	require.ErrorContains(t, err, "invalid_task_queue")
}

// TestWorkerListShowsReplayRefusals: a workflow a worker's replay check
// refused is listed after the table, with its execution and where it
// diverged.
func TestWorkerListShowsReplayRefusals(t *testing.T) {
	t.Parallel()
	var out strings.Builder
	require.NoError(t, printWorkers(&out, []client.Worker{{ID: "w2", TaskQueue: "default", BuildID: "v2~rc", Workflows: []string{}, Activities: []string{"rc_step"},
		ReplayRefused: []client.ReplayRefusal{{Workflow: "rc_order", Reason: "nondeterminism", ExecutionID: "01a2370e-fdd2-7c4b-9c2e-5b6f7a8b9c0d",
			Message: "workflow is not deterministic: at history event 3 …", EventSeq: 3}}}}))
	require.Contains(t, out.String(), "\nworker w2 (build v2~rc) does not take workflow rc_order: execution 01a2370e-fdd2-7c4b-9c2e-5b6f7a8b9c0d "+
		"does not replay on its code (nondeterminism): workflow is not deterministic: at history event 3 …\n")
}

// TestWorkflowVersions: `harvest workflow versions <name>` shows a
// workflow's open executions by the build that ran them last, and the
// route's answer with --json.
func TestWorkflowVersions(t *testing.T) {
	t.Parallel()
	s := startStack(t, devstack.Config{})
	addr := []string{"--addr", s.URL()}
	out, _, err := runCLI(t, append([]string{"workflow", "start", examples.WorkflowCollect, "--input", `{"count": 2}`}, addr...)...)
	require.NoError(t, err, out)

	var v client.WorkflowVersionsResponse
	probe.Until(t, 30*time.Second, "the collect execution to run its first task", func() bool {
		out, _, err = runCLI(t, append([]string{"workflow", "versions", examples.WorkflowCollect, "--json"}, addr...)...)
		require.NoError(t, err, out)
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		return v.Open == 1 && len(v.Builds) == 1 && v.Builds[0].BuildID != ""
	})
	build := v.Builds[0].BuildID
	out, _, err = runCLI(t, append([]string{"workflow", "versions", examples.WorkflowCollect}, addr...)...)
	require.NoError(t, err, out)
	require.Contains(t, out, "collect: 1 open")
	require.Regexp(t, `(?m)^BUILD\s+OPEN$`, out)
	require.Regexp(t, `(?m)^`+regexp.QuoteMeta(build)+`\s+1$`, out)
}
