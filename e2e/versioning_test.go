package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/e2e/internal/versioned"
	"github.com/harvest-engine/harvest/harvesttest"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/service"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// The build ids the versioning tests deploy under.
const (
	buildV1    = "orders-1.0.0"
	buildV2    = "orders-2.0.0"
	buildV2Bad = "orders-2.0.0-unpatched"
)

// TestADeployBehindGetVersion is issue 33's first check, from outside: v1
// of a workflow runs on a worker process and its executions stop at a
// signal; v2, which inserts an activity behind harvest.Patched before
// that signal, replaces it. The old executions finish on the old branch
// (no marker, no audit) and the new ones take the new one (a
// VersionMarker before the audit); every completed workflow task records
// the build that ran it; the versions route shows the split by build and
// by recorded version, then only v2 once the old executions closed.
func TestADeployBehindGetVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler and workers as processes")
	}
	s := startVersionStack(t, false)
	s.deploy(versioned.V1, buildV1)
	old := s.start(3, "old")
	s.waitParked(old, versioned.Prepare)
	s.waitVersions("v1's executions counted under v1, with no change recorded",
		"open 3; builds orders-1.0.0:3; changes none")

	s.deploy(versioned.V2, buildV2)
	fresh := s.start(3, "new")
	s.waitParked(fresh, versioned.Prepare, versioned.Audit)
	s.waitVersions("the split: old executions under v1 without a marker, new ones under v2 with version 1",
		"open 6; builds orders-1.0.0:3 orders-2.0.0:3; changes add-audit{1:3 unrecorded:3}")

	s.signal(old)
	for _, id := range old {
		s.waitCompleted(id, versioned.Prepare, versioned.Finish)
		hist := s.history(id)
		require.Empty(t, markers(hist), "execution %s went past the change under v1: no marker\n%s", id, excerpt(hist))
		require.Equal(t, []string{versioned.Prepare, versioned.Finish}, scheduled(hist), "execution %s\n%s", id, excerpt(hist))
		// The tasks before the signal ran on v1, those after it on v2.
		requireBuildsAroundSignal(t, id, hist)
	}
	s.waitVersions("only v2 once the old executions closed",
		"open 3; builds orders-2.0.0:3; changes add-audit{1:3 unrecorded:0}")

	s.signal(fresh)
	for _, id := range fresh {
		s.waitCompleted(id, versioned.Prepare, versioned.Audit, versioned.Finish)
		hist := s.history(id)
		require.Equal(t, []string{versioned.ChangeID + "=1"}, markers(hist), "execution %s\n%s", id, excerpt(hist))
		require.Equal(t, []string{versioned.Prepare, versioned.Audit, versioned.Finish}, scheduled(hist), "execution %s\n%s", id, excerpt(hist))
		marker := slices.IndexFunc(hist, func(e client.Event) bool { return e.Type == "VersionMarker" })
		audit := slices.IndexFunc(hist, func(e client.Event) bool {
			return e.Type == "ActivityScheduled" && e.Attrs["activity_name"] == versioned.Audit
		})
		require.Less(t, marker, audit, "execution %s: the marker comes before the branch it chose\n%s", id, excerpt(hist))
		for _, b := range taskBuilds(hist) {
			require.Equal(t, buildV2, b, "execution %s\n%s", id, excerpt(hist))
		}
	}
	s.waitVersions("nothing open", "open 0; builds none; changes none")
}

// TestADeployOutsideGetVersion is issue 33's second check, from outside:
// v2 inserts the activity without GetVersion. Before the deploy, the
// running executions' histories exported with the harvest CLI and
// replayed with harvesttest report the divergence on that code, and none
// on v2 behind Patched. Deployed anyway, its workers fail the executions'
// tasks: each shows task_failing (nondeterminism, where, what the history
// has and what the code asked for, the build) and stays Running; rolling
// back to v1 completes them on the path they took.
func TestADeployOutsideGetVersion(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler and workers as processes")
	}
	s := startVersionStack(t, true)
	s.deploy(versioned.V1, buildV1)
	ids := s.start(3, "order")
	s.waitParked(ids, versioned.Prepare)

	// The deploy pipeline's check, before the deploy.
	dir := t.TempDir()
	out, err := exec.CommandContext(s.ctx, filepath.Join(s.bins, "harvest"), "workflow", "histories", "export",
		"--workflow", versioned.Workflow, "--status", "Running", "--out", dir, "--addr", s.url).CombinedOutput()
	require.NoError(t, err, "harvest workflow histories export: %s", out)
	require.Contains(t, string(out), "wrote 3 histories of "+versioned.Workflow)
	replay := func(variant string) harvesttest.HistoryReplay {
		register, err := versioned.Register(variant)
		require.NoError(t, err)
		r, err := harvesttest.ReplayHistoryDir(register, dir)
		require.NoError(t, err)
		require.Equal(t, 3, r.Replayed, "%s replays every exported history", variant)
		return r
	}
	require.Empty(t, replay(versioned.V1).Divergences, "the running code replays its own histories")
	require.Empty(t, replay(versioned.V2).Divergences, "the change behind Patched replays them")
	bad := replay(versioned.V2Bad)
	require.Len(t, bad.Divergences, 3, "the change outside GetVersion breaks every running execution")
	for _, err := range bad.Divergences {
		var nd *harvest.NonDeterminismError
		require.ErrorAs(t, err, &nd)
		require.ErrorIs(t, err, harvest.ErrNonDeterministic)
		require.Contains(t, nd.Code, versioned.Audit, "the code asked for the audit: %v", err)
		require.Positive(t, nd.Seq, "%v", err)
	}
	t.Logf("the replay before the deploy reports: %v", bad.Divergences[0])

	// Deployed anyway: the executions' tasks fail on it, and wait.
	s.deploy(versioned.V2Bad, buildV2Bad)
	s.signal(ids)
	for _, id := range ids {
		var e *client.Execution
		waitFor(t, 30*time.Second, "execution "+id+" to show its task failing on "+buildV2Bad, func() (bool, string) {
			var err error
			e, err = s.c.Describe(s.ctx, id)
			if err != nil {
				return false, err.Error()
			}
			return e.TaskFailing != nil && e.TaskFailing.BuildID == buildV2Bad, string(e.Raw)
		})
		f := e.TaskFailing
		require.Equal(t, client.StatusRunning, e.Status, "%s", e.Raw)
		require.Equal(t, "nondeterminism", f.Reason, "%s", e.Raw)
		require.Positive(t, f.EventSeq, "%s", e.Raw)
		require.NotEmpty(t, f.History, "%s", e.Raw)
		require.Contains(t, f.Code, versioned.Audit, "%s", e.Raw)
		require.Contains(t, f.Message, "not deterministic", "%s", e.Raw)
		require.Positive(t, f.Attempts, "%s", e.Raw)
		require.False(t, f.NextAttemptAt.IsZero(), "%s", e.Raw)
		if id == ids[0] {
			t.Logf("execution %s on %s: %s\n%s", id, buildV2Bad, e.Raw, excerpt(s.history(id)))
		}
	}
	failures := scrapeCounters(t, "http://"+s.admin+"/metrics", "harvest_worker_workflow_task_failures_total")
	var counted float64
	for series, v := range failures {
		if strings.Contains(series, `workflow="`+versioned.Workflow+`"`) && strings.Contains(series, `reason="nondeterminism"`) {
			counted += v
		}
	}
	require.GreaterOrEqual(t, counted, 3.0, "the worker counts the failed tasks: %v", failures)

	// Rolled back: v1 completes them on the path they took, and the
	// failing mark goes.
	s.deploy(versioned.V1, buildV1)
	for _, id := range ids {
		e := s.waitCompleted(id, versioned.Prepare, versioned.Finish)
		require.Nil(t, e.TaskFailing, "%s", e.Raw)
		hist := s.history(id)
		require.Empty(t, markers(hist), "execution %s\n%s", id, excerpt(hist))
		require.Equal(t, []string{versioned.Prepare, versioned.Finish}, scheduled(hist), "execution %s\n%s", id, excerpt(hist))
		builds := taskBuilds(hist)
		require.NotContains(t, builds, buildV2Bad, "execution %s: a failed task records nothing\n%s", id, excerpt(hist))
		for _, b := range builds {
			require.Equal(t, buildV1, b, "execution %s\n%s", id, excerpt(hist))
		}
	}
}

// TestAReplayCheckRefusesABadDeploy is issue 33's check of the replay
// check, from outside: "the same v2 without GetVersion: with ReplayCheck
// the new worker refuses the workflow and the old worker keeps running
// it". v1 runs executions parked at the signal; v2bad (the audit inserted
// outside GetVersion) starts beside it with WorkerConfig.ReplayCheck,
// replays their histories, finds they diverge, and does not register the
// workflow: it is ready, takes the activities, shows the refusal on the
// workers route, counts it, and logs it. v1 stays the newest build of the
// workflow, so new starts and the signalled executions complete on v1's
// path, none of their tasks failing. v2, the same change behind Patched,
// passes the check on v1's running executions and takes the workflow.
func TestAReplayCheckRefusesABadDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler and workers as processes")
	}
	const replayCheck = "VERSION_REPLAY_CHECK=5"
	s := startVersionStack(t, false)
	_, admin1 := s.launch(versioned.V1, buildV1)
	old := s.start(3, "old")
	s.waitParked(old, versioned.Prepare)

	// v2bad beside v1: ready, but without the workflow.
	badProc, adminBad := s.launch(versioned.V2Bad, buildV2Bad, replayCheck)
	bad := s.workerOf(buildV2Bad)
	require.NotContains(t, bad.Workflows, versioned.Workflow, "%+v", bad)
	require.ElementsMatch(t, []string{versioned.Prepare, versioned.Audit, versioned.Finish}, bad.Activities, "%+v", bad)
	require.Len(t, bad.ReplayRefused, 1, "%+v", bad)
	r := bad.ReplayRefused[0]
	require.Equal(t, versioned.Workflow, r.Workflow, "%+v", r)
	require.Equal(t, "nondeterminism", r.Reason, "%+v", r)
	require.Contains(t, old, r.ExecutionID, "%+v", r)
	require.Positive(t, r.EventSeq, "%+v", r)
	require.Contains(t, r.Message, "not deterministic", "%+v", r)
	require.Contains(t, r.Message, versioned.Audit, "the code asked for the audit: %+v", r)
	t.Logf("%s refused %s: %+v", buildV2Bad, versioned.Workflow, r)
	require.InDelta(t, 1, replayChecks(t, adminBad, "refused"), 0)
	require.InDelta(t, 0, replayChecks(t, adminBad, "skipped"), 0)
	lines := badProc.logText()
	require.Contains(t, lines, "replay check: this worker does not take the workflow", lines)
	require.Contains(t, lines, r.ExecutionID, lines)

	one := s.workerOf(buildV1)
	require.Equal(t, []string{versioned.Workflow}, one.Workflows, "%+v", one)
	require.Empty(t, one.ReplayRefused, "%+v", one)
	require.InDelta(t, 1, newestBuild(t, admin1), 0, "v1 stays the newest build of the workflow")

	// New starts take v1's path; signalled, every execution completes on
	// v1, and none of their tasks fails anywhere.
	fresh := s.start(3, "new")
	s.waitParked(fresh, versioned.Prepare)
	s.signal(old)
	s.signal(fresh)
	all := slices.Concat(old, fresh)
	s.waitAllCompleted(all)
	for _, id := range all {
		e := s.waitCompleted(id, versioned.Prepare, versioned.Finish)
		require.Nil(t, e.TaskFailing, "%s", e.Raw)
		s.requireRanOn(id, buildV1)
	}
	require.Zero(t, taskFailures(t, admin1), "v1's workflow task failures")
	require.Zero(t, taskFailures(t, adminBad), "v2bad's workflow task failures")
	require.InDelta(t, 1, newestBuild(t, admin1), 0, "v1 is still the newest build of the workflow")

	// v2, the change behind Patched, with v1's executions running: it
	// passes the check and takes the workflow from v1.
	late := s.start(3, "late")
	s.waitParked(late, versioned.Prepare)
	_, admin2 := s.launch(versioned.V2, buildV2, replayCheck)
	two := s.workerOf(buildV2)
	require.Equal(t, []string{versioned.Workflow}, two.Workflows, "%+v", two)
	require.Empty(t, two.ReplayRefused, "%+v", two)
	require.InDelta(t, 3, replayChecks(t, admin2, "passed"), 0)
	require.InDelta(t, 0, replayChecks(t, admin2, "refused"), 0)
	require.InDelta(t, 0, replayChecks(t, admin2, "skipped"), 0)
	waitFor(t, 30*time.Second, "v1's worker to see v2 as the newest build", func() (bool, string) {
		n1, n2 := newestBuild(t, admin1), newestBuild(t, admin2)
		return n1 == 0 && n2 == 1, fmt.Sprintf("harvest_worker_workflow_newest_build: v1 %v, v2 %v", n1, n2)
	})
	s.signal(late)
	s.waitAllCompleted(late)
	for _, id := range late {
		s.waitCompleted(id, versioned.Prepare, versioned.Finish)
		hist := s.history(id)
		require.Empty(t, markers(hist), "execution %s went past the change under v1: no marker\n%s", id, excerpt(hist))
		requireBuildsAroundSignal(t, id, hist)
	}
	require.Zero(t, taskFailures(t, admin2), "v2's workflow task failures")
}

// workerOf waits until the workers route lists a live worker of build,
// and returns it.
func (s *versionStack) workerOf(build string) client.Worker {
	s.t.Helper()
	var found client.Worker
	waitFor(s.t, 10*time.Second, "a worker of "+build+" on the workers route", func() (bool, string) {
		ws, err := s.c.Workers(s.ctx)
		if err != nil {
			return false, err.Error()
		}
		for _, w := range ws {
			if w.BuildID == build {
				found = w
				return true, ""
			}
		}
		return false, fmt.Sprintf("%+v", ws)
	})
	return found
}

// waitAllCompleted waits until every execution completed, and fails as
// soon as one shows a failing workflow task.
func (s *versionStack) waitAllCompleted(ids []string) {
	s.t.Helper()
	waitFor(s.t, 30*time.Second, "the executions to complete, none with a failing task", func() (bool, string) {
		var state []string
		for _, id := range ids {
			e, err := s.c.Describe(s.ctx, id)
			require.NoError(s.t, err)
			require.Nil(s.t, e.TaskFailing, "execution %s: a task of it failed\n%s", id, e.Raw)
			if e.Status != client.StatusCompleted {
				state = append(state, fmt.Sprintf("%s %s", id, e.Status))
			}
		}
		return len(state) == 0, strings.Join(state, "\n")
	})
}

// replayChecks is the worker's harvest_worker_replay_check_total for the
// versioned workflow and result, scraped from its admin address.
func replayChecks(t *testing.T, admin, result string) float64 {
	t.Helper()
	v, n := probe.Read(t, probe.Scrape(t, "http://"+admin+"/metrics"), "harvest_worker_replay_check_total",
		"workflow", versioned.Workflow, "result", result)
	require.Positive(t, n, "no harvest_worker_replay_check_total{result=%q} on %s", result, admin)
	return v
}

// newestBuild is the worker's harvest_worker_workflow_newest_build for
// the versioned workflow, scraped from its admin address.
func newestBuild(t *testing.T, admin string) float64 {
	t.Helper()
	v, _ := probe.Read(t, probe.Scrape(t, "http://"+admin+"/metrics"), "harvest_worker_workflow_newest_build", "workflow", versioned.Workflow)
	return v
}

// taskFailures is the worker's count of the versioned workflow's failed
// workflow tasks, whatever the reason, scraped from its admin address.
func taskFailures(t *testing.T, admin string) float64 {
	t.Helper()
	var n float64
	for series, v := range scrapeCounters(t, "http://"+admin+"/metrics", "harvest_worker_workflow_task_failures_total") {
		if strings.Contains(series, `workflow="`+versioned.Workflow+`"`) {
			n += v
		}
	}
	return n
}

// logText is the log of the process's current run.
func (p *proc) logText() string {
	p.t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("%s.%d.log", p.log, p.n))
	require.NoError(p.t, err)
	return string(data)
}

// TestAPinnedDeploy is issue 33's check of pinned workflows, from
// outside: "a pinned workflow keeps its executions on build 1 while
// build 2 workers run new ones". The scheduler's configuration pins the
// workflow; build 1 (v1) starts executions that wait at the signal, then
// build 2 starts beside it with code that diverges from their histories
// (v2bad, which inserts the audit outside GetVersion: a v1 execution's
// task reaching it would fail, and show task_failing). New executions
// pin to build 2 and take its path; signalled, every execution finishes
// on its own build. With build 1 stopped, an execution pinned to it
// waits, visibly, starts naming it are refused, and starting build 1
// again finishes it.
func TestAPinnedDeploy(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler and workers as processes")
	}
	conf := filepath.Join(t.TempDir(), "harvest.yaml")
	require.NoError(t, os.WriteFile(conf, []byte("workflows:\n  "+versioned.Workflow+":\n    versioning: pinned\n"), 0o600))
	s := startVersionStack(t, false, service.EnvConfig+"="+conf)

	// Build 1 alone: the configuration pins what it starts to it.
	b1, admin1 := s.launch(versioned.V1, buildV1)
	old := s.start(3, "old")
	s.waitParked(old, versioned.Prepare)
	for _, id := range old {
		s.requirePinned(id, buildV1)
	}

	// Build 2 beside it, which becomes the newest build of the workflow:
	// build 1's worker stops taking its unpinned tasks.
	_, admin2 := s.launch(versioned.V2Bad, buildV2Bad)
	waitFor(t, 30*time.Second, "the workers route to list both builds", func() (bool, string) {
		ws, err := s.c.Workers(s.ctx)
		if err != nil {
			return false, err.Error()
		}
		var builds []string
		for _, w := range ws {
			if slices.Contains(w.Workflows, versioned.Workflow) {
				builds = append(builds, w.BuildID)
			}
		}
		slices.Sort(builds)
		return slices.Equal(builds, []string{buildV1, buildV2Bad}), fmt.Sprint(builds)
	})
	newest := func(admin string) float64 {
		v, _ := probe.Read(t, probe.Scrape(t, "http://"+admin+"/metrics"), "harvest_worker_workflow_newest_build", "workflow", versioned.Workflow)
		return v
	}
	waitFor(t, 30*time.Second, "build 1's worker to see build 2 as the newest", func() (bool, string) {
		one, two := newest(admin1), newest(admin2)
		return one == 0 && two == 1, fmt.Sprintf("harvest_worker_workflow_newest_build: build 1 %v, build 2 %v", one, two)
	})

	// New executions pin to build 2 and take its path; one more, naming
	// build 1, pins to it while build 2 is the newest.
	fresh := s.start(3, "new")
	s.waitParked(fresh, versioned.Prepare, versioned.Audit)
	for _, id := range fresh {
		s.requirePinned(id, buildV2Bad)
	}
	res, err := s.c.Start(s.ctx, versioned.Workflow, "late", client.StartOptions{BuildID: buildV1})
	require.NoError(t, err)
	late := res.ExecutionID
	s.waitParked([]string{late}, versioned.Prepare)
	s.requirePinned(late, buildV1)
	s.waitVersions("each build counts its own executions",
		"open 7; builds orders-1.0.0:4 orders-2.0.0-unpatched:3; changes none")

	// Signalled, each finishes on its own build: no old execution's task
	// ever reaches build 2's code.
	s.signal(old)
	s.signal(fresh)
	open := slices.Concat(old, fresh)
	waitFor(t, 30*time.Second, "the signalled executions to complete, none with a failing task", func() (bool, string) {
		var state []string
		for _, id := range open {
			e, err := s.c.Describe(s.ctx, id)
			require.NoError(t, err)
			require.Nil(t, e.TaskFailing, "execution %s: a task of it failed\n%s", id, e.Raw)
			if e.Status != client.StatusCompleted {
				state = append(state, fmt.Sprintf("%s %s", id, e.Status))
			}
		}
		return len(state) == 0, strings.Join(state, "\n")
	})
	for _, id := range old {
		s.waitCompleted(id, versioned.Prepare, versioned.Finish)
		s.requireRanOn(id, buildV1)
	}
	for _, id := range fresh {
		s.waitCompleted(id, versioned.Prepare, versioned.Audit, versioned.Finish)
		s.requireRanOn(id, buildV2Bad)
	}

	// Build 1 stops while late waits: it waits for build 1, visibly, and
	// starts naming build 1 are refused until it is back.
	b1.terminate(30 * time.Second)
	var e *client.Execution
	waitFor(t, 30*time.Second, "execution "+late+" to show that it waits for build 1", func() (bool, string) {
		var err error
		e, err = s.c.Describe(s.ctx, late)
		require.NoError(t, err)
		return e.WaitingForWorker, string(e.Raw)
	})
	require.Equal(t, client.StatusRunning, e.Status, "%s", e.Raw)
	require.Equal(t, []client.WaitingFor{{Kind: client.WaitingForWorkflow, Name: versioned.Workflow, TaskQueue: "default", BuildID: buildV1}},
		e.WaitingForWorkers, "%s", e.Raw)
	_, err = s.c.Start(s.ctx, versioned.Workflow, "refused", client.StartOptions{BuildID: buildV1})
	var refused *client.APIError
	require.ErrorAs(t, err, &refused, "a start naming a build no live worker runs")
	require.Equal(t, http.StatusBadRequest, refused.StatusCode, "%v", err)
	require.Equal(t, api.CodeInvalidBuild, refused.Code, "%v", err)
	require.Equal(t, "build_id", refused.Field, "%v", err)
	// Its signal arrives while build 1 is gone: the task waits for it,
	// and build 2, running, does not take it.
	s.signal([]string{late})
	e, err = s.c.Describe(s.ctx, late)
	require.NoError(t, err)
	require.Equal(t, client.StatusRunning, e.Status, "%s", e.Raw)
	require.True(t, e.WaitingForWorker, "%s", e.Raw)

	s.launch(versioned.V1, buildV1)
	e = s.waitCompleted(late, versioned.Prepare, versioned.Finish)
	require.Nil(t, e.TaskFailing, "%s", e.Raw)
	s.requireRanOn(late, buildV1)

	// Build 2's worker never failed a task: none of build 1's reached it.
	var failed float64
	for series, v := range scrapeCounters(t, "http://"+admin2+"/metrics", "harvest_worker_workflow_task_failures_total") {
		if strings.Contains(series, `workflow="`+versioned.Workflow+`"`) {
			failed += v
		}
	}
	require.Zero(t, failed, "build 2's workflow task failures")
	s.waitVersions("nothing open", "open 0; builds none; changes none")
}

// requirePinned requires that describe show the execution pinned to
// build.
func (s *versionStack) requirePinned(id, build string) {
	s.t.Helper()
	e, err := s.c.Describe(s.ctx, id)
	require.NoError(s.t, err)
	require.Equal(s.t, client.VersioningPinned, e.Versioning, "execution %s\n%s", id, e.Raw)
	require.Equal(s.t, build, e.PinnedBuild, "execution %s\n%s", id, e.Raw)
}

// requireRanOn requires that every workflow task of the execution's
// history was completed by build, and that it has no version marker.
func (s *versionStack) requireRanOn(id, build string) {
	s.t.Helper()
	hist := s.history(id)
	builds := taskBuilds(hist)
	require.NotEmpty(s.t, builds, "execution %s\n%s", id, excerpt(hist))
	for _, b := range builds {
		require.Equal(s.t, build, b, "execution %s\n%s", id, excerpt(hist))
	}
	require.Empty(s.t, markers(hist), "execution %s\n%s", id, excerpt(hist))
}

// versionStack is a scheduler and one deployed worker of the versioned
// workflow (testdata/versionworker) running as processes against natstest
// and pgtest, with ingest in the test process; deploy replaces the worker
// as a deploy does.
type versionStack struct {
	t    *testing.T
	ctx  context.Context
	bins string
	logs string
	env  []string
	url  string
	c    *client.Client
	// worker is the deployed worker, admin its admin address; deploys
	// counts them, to name their logs.
	worker  *proc
	admin   string
	deploys int
}

// startVersionStack builds the scheduler and the version worker (and the
// harvest CLI, with cli) and starts all but the worker; schedulerEnv are
// the scheduler's own variables beyond the stack's.
func startVersionStack(t *testing.T, cli bool, schedulerEnv ...string) *versionStack {
	t.Helper()
	s := &versionStack{t: t, ctx: natstest.Context(t), bins: t.TempDir(), logs: t.TempDir()}
	pkgs := []string{"github.com/harvest-engine/harvest/cmd/scheduler", "./testdata/versionworker"}
	if cli {
		pkgs = append(pkgs, "github.com/harvest-engine/harvest/cmd/harvest")
	}
	out, err := exec.Command("go", append([]string{"build", "-o", s.bins + string(filepath.Separator)}, pkgs...)...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)

	ns := natstest.RunServer(t, natstest.Options{})
	dbURL := pgtest.NewDatabase(t)
	s.env = []string{"HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + dbURL}
	(&proc{t: t, name: "scheduler", bin: filepath.Join(s.bins, "scheduler"), env: append(slices.Clone(s.env), schedulerEnv...),
		log: filepath.Join(s.logs, "scheduler")}).start()
	nc, err := nats.Connect(ns.ClientURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	js, err := jetstream.New(nc)
	require.NoError(t, err)
	top, err := broker.Declare(s.ctx, js, broker.Config{})
	require.NoError(t, err)
	db, err := pgxpool.New(s.ctx, dbURL)
	require.NoError(t, err)
	t.Cleanup(db.Close)
	// Declared, as a deployment's configuration does: starts are accepted
	// between one worker's stop and the next one's start.
	api, err := ingest.New(ingest.Config{Topology: top, NC: nc, DB: db, OutcomeWait: 2 * time.Second, DeclaredWorkflows: []string{versioned.Workflow}})
	require.NoError(t, err)
	require.NoError(t, api.Start(s.ctx))
	t.Cleanup(func() { _ = api.Stop(context.Background()) })
	srv := httptest.NewServer(api.Handler())
	t.Cleanup(srv.Close)
	s.url = srv.URL
	s.c, err = client.New(client.Config{BaseURL: srv.URL})
	require.NoError(t, err)
	return s
}

// deploy stops the deployed worker, if any, with SIGTERM (it exits 0),
// then starts a worker of variant with the build id build, and extra
// variables (worker settings of a later test), and waits until it is
// ready.
func (s *versionStack) deploy(variant, build string, extra ...string) {
	s.t.Helper()
	if s.worker != nil {
		s.worker.terminate(30 * time.Second)
	}
	s.worker, s.admin = s.launch(variant, build, extra...)
	s.t.Logf("deployed %s", s.worker.name)
}

// launch starts a worker of variant with the build id build, and extra
// variables, beside whatever workers run, waits until it is ready, and
// returns it with its admin address.
func (s *versionStack) launch(variant, build string, extra ...string) (*proc, string) {
	s.t.Helper()
	s.deploys++
	admin := freeAddr(s.t)
	w := &proc{t: s.t, name: fmt.Sprintf("worker %s (%s)", variant, build), bin: filepath.Join(s.bins, "versionworker"),
		log: filepath.Join(s.logs, fmt.Sprintf("worker%d-%s", s.deploys, variant)),
		env: append(append(slices.Clone(s.env), "VERSION_VARIANT="+variant, "VERSION_BUILD_ID="+build, "HARVEST_ADMIN_ADDR="+admin), extra...)}
	w.start()
	probe.Until(s.t, 60*time.Second, w.name+" ready", func() bool {
		res, err := http.Get("http://" + admin + "/readyz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	return w, admin
}

// terminate stops the process with SIGTERM, as a deploy does, and
// requires that it exit cleanly within.
func (p *proc) terminate(within time.Duration) {
	p.t.Helper()
	require.NoError(p.t, p.cmd.Process.Signal(syscall.SIGTERM))
	exited := make(chan error, 1)
	go func() { exited <- p.cmd.Wait() }()
	select {
	case err := <-exited:
		require.NoError(p.t, err, "%s exits cleanly on SIGTERM", p.name)
	case <-time.After(within):
		p.t.Fatalf("%s did not stop within %s of SIGTERM", p.name, within)
	}
}

// start starts n executions of the versioned workflow and returns their
// ids.
func (s *versionStack) start(n int, prefix string) []string {
	s.t.Helper()
	ids := make([]string, n)
	for i := range ids {
		res, err := s.c.Start(s.ctx, versioned.Workflow, fmt.Sprintf("%s-%d", prefix, i), client.StartOptions{})
		require.NoError(s.t, err)
		ids[i] = res.ExecutionID
	}
	return ids
}

// waitParked waits until each execution ran the activities ran and waits
// for its signal: its history schedules and completes them, and ends with
// the workflow task that found nothing more to do.
func (s *versionStack) waitParked(ids []string, ran ...string) {
	s.t.Helper()
	for _, id := range ids {
		waitFor(s.t, 30*time.Second, fmt.Sprintf("execution %s to run %v and wait for its signal", id, ran), func() (bool, string) {
			hist, err := s.c.History(s.ctx, id)
			if err != nil {
				return false, err.Error()
			}
			done := 0
			for _, e := range hist {
				if e.Type == "ActivityCompleted" {
					done++
				}
			}
			parked := len(hist) > 0 && slices.Equal(scheduled(hist), ran) && done == len(ran) && hist[len(hist)-1].Type == "WorkflowTaskCompleted"
			return parked, excerpt(hist)
		})
	}
}

// waitVersions waits until the versions route answers want, as versions
// writes it.
func (s *versionStack) waitVersions(what, want string) {
	s.t.Helper()
	waitFor(s.t, 30*time.Second, what+": "+want, func() (bool, string) {
		v, err := s.c.WorkflowVersions(s.ctx, versioned.Workflow)
		if err != nil {
			return false, err.Error()
		}
		got := versions(v)
		return got == want, got
	})
}

// versions writes a versions answer in one line, builds and versions in
// a fixed order: "open 6; builds b1:3 b2:3; changes c{1:3 unrecorded:3}".
func versions(v *client.WorkflowVersionsResponse) string {
	var builds, changes []string
	for _, b := range v.Builds {
		builds = append(builds, fmt.Sprintf("%s:%d", b.BuildID, b.Open))
	}
	for _, c := range v.Changes {
		var counts []string
		for _, n := range c.Versions {
			counts = append(counts, fmt.Sprintf("%d:%d", n.Version, n.Open))
		}
		slices.Sort(counts)
		changes = append(changes, fmt.Sprintf("%s{%s unrecorded:%d}", c.ChangeID, strings.Join(counts, " "), c.Unrecorded))
	}
	slices.Sort(builds)
	slices.Sort(changes)
	list := func(l []string) string {
		if len(l) == 0 {
			return "none"
		}
		return strings.Join(l, " ")
	}
	return fmt.Sprintf("open %d; builds %s; changes %s", v.Open, list(builds), list(changes))
}

// signal sends each execution the signal it waits for.
func (s *versionStack) signal(ids []string) {
	s.t.Helper()
	for _, id := range ids {
		require.NoError(s.t, s.c.SendSignal(s.ctx, id, versioned.Signal, "go"))
	}
}

// waitCompleted waits until the execution completed, and requires that
// it ran the activities ran.
func (s *versionStack) waitCompleted(id string, ran ...string) *client.Execution {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, 30*time.Second)
	defer cancel()
	var got []string
	e, err := s.c.WaitResult(ctx, id, &got)
	if err != nil {
		raw := "(none)"
		if e != nil {
			raw = string(e.Raw)
		}
		var failed *client.ExecutionFailedError
		if !errors.As(err, &failed) {
			if e, err := s.c.Describe(s.ctx, id); err == nil {
				raw = string(e.Raw)
			}
		}
		s.t.Fatalf("execution %s: %v\n%s\n%s", id, err, raw, excerpt(s.history(id)))
	}
	require.Equal(s.t, ran, got, "execution %s's result", id)
	return e
}

// history reads the execution's history.
func (s *versionStack) history(id string) []client.Event {
	s.t.Helper()
	hist, err := s.c.History(s.ctx, id)
	require.NoError(s.t, err)
	return hist
}

// scheduled are the activities the history schedules, in order.
func scheduled(hist []client.Event) []string {
	return eventsOf(hist, "ActivityScheduled", func(e client.Event) string { return fmt.Sprint(e.Attrs["activity_name"]) })
}

// markers are the history's version markers, as change=version.
func markers(hist []client.Event) []string {
	return eventsOf(hist, "VersionMarker", func(e client.Event) string { return fmt.Sprintf("%v=%v", e.Attrs["change_id"], e.Attrs["version"]) })
}

// taskBuilds are the build ids the history's completed workflow tasks
// record, in order.
func taskBuilds(hist []client.Event) []string {
	return eventsOf(hist, "WorkflowTaskCompleted", func(e client.Event) string { return fmt.Sprint(e.Attrs["build_id"]) })
}

// eventsOf is what show says of each of the history's events of type
// typ, in order.
func eventsOf(hist []client.Event, typ string, show func(client.Event) string) []string {
	var out []string
	for _, e := range hist {
		if e.Type == typ {
			out = append(out, show(e))
		}
	}
	return out
}

// excerpt is a history, one event a line, for a failure's message.
func excerpt(hist []client.Event) string {
	var b strings.Builder
	for _, e := range hist {
		attrs, _ := json.Marshal(e.Attrs)
		fmt.Fprintf(&b, "  %d %s %s\n", e.Seq, e.Type, attrs)
	}
	return b.String()
}

// waitFor polls cond until it is done, within; on timeout it fails t with
// the state cond saw last.
func waitFor(t *testing.T, within time.Duration, what string, cond func() (done bool, state string)) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		done, state := cond()
		if done {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s; last seen:\n%s", within, what, state)
		}
		time.Sleep(probe.Interval) // the poll interval, not synchronisation
	}
}

// requireBuildsAroundSignal holds that execution id's workflow tasks
// before its signal ran on v1 and those after it on v2 (each side has
// some).
func requireBuildsAroundSignal(t *testing.T, id string, hist []client.Event) {
	t.Helper()
	signalled := slices.IndexFunc(hist, func(e client.Event) bool { return e.Type == "SignalReceived" })
	require.Positive(t, signalled, "execution %s\n%s", id, excerpt(hist))
	before, after := taskBuilds(hist[:signalled]), taskBuilds(hist[signalled:])
	require.NotEmpty(t, before, "execution %s\n%s", id, excerpt(hist))
	require.NotEmpty(t, after, "execution %s\n%s", id, excerpt(hist))
	for _, b := range before {
		require.Equal(t, buildV1, b, "execution %s: a task before v2 took the workflow\n%s", id, excerpt(hist))
	}
	for _, b := range after {
		require.Equal(t, buildV2, b, "execution %s: a task after v2 took the workflow\n%s", id, excerpt(hist))
	}
}
