package e2e

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/e2e/internal/long"
	"github.com/harvest-engine/harvest/internal/testing/natstest"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// Issue 34's checks of long-lived workflows, from outside: a workflow
// that receives 20,000 signals completes, and so does one that runs 5,000
// activities. The suite runs them small; the sizes are run by
// hand (docs/benchmarks.md quotes the figures):
//
//	go test -count=1 -run 'TestAWorkflow(ReceivesManySignals|RunsManyActivities)' ./e2e \
//	    -long.signals 20000 -long.activities 5000 -timeout 30m -v
var (
	longSignals    = flag.Int("long.signals", 1000, "long: keyed signals of about 300 bytes that one long_signals execution receives (the issue's check: 20000)")
	longInFlight   = flag.Int("long.inflight", 16, "long: signals sent at once")
	longActivities = flag.Int("long.activities", 300, "long: activities that one long_activities execution runs (the issue's check: 5000)")
	longParallel   = flag.Int("long.parallel", 50, "long: activities long_activities runs at a time")
	longChunk      = flag.Int("long.chunk", 1000, "long: the figures are logged per this many signals or activities")
	longChildren   = flag.Int("long.children", 0, "long: children one chaos_family parent fans out (0: skip the check; the issue's check: 500)")
)

// longStack is a scheduler, ingest and a worker of the long workflows
// (testdata/longworker), each a process, on a NATS server and a database
// of their own; the test is a client of ingest's HTTP API.
type longStack struct {
	t   *testing.T
	ctx context.Context
	c   *client.Client
}

// startLongStack builds and starts the stack, and waits until each
// process is ready. The test's requests give up within of now.
func startLongStack(t *testing.T, within time.Duration) *longStack {
	t.Helper()
	return startLongStackOf(t, within, "longworker")
}

// startLongStackOf is startLongStack with the worker built from
// testdata/<worker>, given workerEnv besides the services' environment.
func startLongStackOf(t *testing.T, within time.Duration, worker string, workerEnv ...string) *longStack {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), within)
	t.Cleanup(cancel)
	bins, logs := t.TempDir(), t.TempDir()
	out, err := exec.Command("go", "build", "-o", bins+string(filepath.Separator), "github.com/harvest-engine/harvest/cmd/scheduler",
		"github.com/harvest-engine/harvest/cmd/ingest", "./testdata/"+worker).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	ns := natstest.RunServer(t, natstest.Options{})
	env := []string{"HARVEST_NATS_URL=" + ns.ClientURL(), "HARVEST_DATABASE_URL=" + pgtest.NewDatabase(t)}
	addr := freeAddr(t)
	for _, p := range []struct{ name, bin, readyURL, extra string }{
		// The scheduler first: it declares the streams.
		{"scheduler", "scheduler", "", "HARVEST_ADMIN_ADDR="},
		{"ingest", "ingest", "http://" + addr + "/readyz", "HARVEST_HTTP_ADDR=" + addr},
		{"worker", worker, "", "HARVEST_ADMIN_ADDR="},
	} {
		extra := p.extra
		ready := p.readyURL
		if ready == "" {
			admin := freeAddr(t)
			extra += admin
			ready = "http://" + admin + "/readyz"
		}
		penv := append(slices.Clone(env), extra)
		if p.name == "worker" {
			penv = append(penv, workerEnv...)
		}
		(&proc{t: t, name: p.name, bin: filepath.Join(bins, p.bin), log: filepath.Join(logs, p.name), env: penv}).start()
		probe.Until(t, 60*time.Second, p.name+" ready", func() bool {
			res, err := http.Get(ready)
			if err != nil {
				return false
			}
			res.Body.Close()
			return res.StatusCode == http.StatusOK
		})
	}
	// Many requests in flight: keep as many connections.
	hc := &http.Client{Timeout: 60 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 128}}
	c, err := client.New(client.Config{BaseURL: "http://" + addr, HTTPClient: hc})
	require.NoError(t, err)
	return &longStack{t: t, ctx: ctx, c: c}
}

// start starts workflow with input, once the worker's registration has
// reached ingest (until then ingest refuses the start as unknown).
func (s *longStack) start(workflow string, input any) string {
	s.t.Helper()
	var id string
	waitFor(s.t, 30*time.Second, "a start of "+workflow+" to be accepted", func() (bool, string) {
		res, err := s.c.Start(s.ctx, workflow, input, client.StartOptions{})
		if err != nil {
			return false, err.Error()
		}
		id = res.ExecutionID
		return true, ""
	})
	return id
}

// finish waits for the execution's result (failing on any status but
// Completed), reads its description and its history, and requires that
// no command was set aside on the way.
func (s *longStack) finish(id string, within time.Duration, out any) (*client.Execution, []client.Event) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(s.ctx, within)
	defer cancel()
	e, err := s.c.WaitResult(ctx, id, out)
	require.NoError(s.t, err, "execution %s", id)
	hist, err := s.c.History(s.ctx, id)
	require.NoError(s.t, err)
	require.Len(s.t, hist, e.HistoryLength, "describe's history_length is the history's")
	dead, err := s.c.DeadCommands(s.ctx, client.DeadCommandsOptions{})
	require.NoError(s.t, err)
	require.Empty(s.t, dead, "no command was set aside")
	return e, hist
}

// TestAWorkflowReceivesManySignals is issue 34's check "a workflow that
// receives 20,000 signals (each a few hundred bytes) completes", at
// -long.signals: one execution of long_signals is sent that many keyed
// item signals of about 300 bytes, -long.inflight at a time, every
// fiftieth sent twice; it completes once it has received them and
// returns what it saw, which must be every item exactly once. The
// signal calls' latency and the workflow's lag behind them (from a
// signal's SignalReceived to the WorkflowTaskCompleted of the task that
// first saw it) are logged per -long.chunk signals, from the first to
// the last: what a signal costs as the history grows.
func TestAWorkflowReceivesManySignals(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler, ingest and a worker as processes")
	}
	n, inFlight, chunk := *longSignals, max(*longInFlight, 1), max(*longChunk, 1)
	// The sends, one at a time, take about 6 ms a signal on the 2-core
	// development machine; the bound is generous.
	s := startLongStack(t, 2*time.Minute+time.Duration(n)*50*time.Millisecond/time.Duration(inFlight))
	id := s.start(long.WorkflowSignals, long.SignalsInput{Count: n})
	key := func(i int) string { return "item-" + strconv.Itoa(i) }

	// Each answer's index in the order the answers came, and when.
	type answer struct {
		item    int
		at      time.Time
		latency time.Duration
	}
	answers := make([]answer, n)
	var answered atomic.Int64
	var failed atomic.Bool
	jobs := make(chan int)
	var wg sync.WaitGroup
	begin := time.Now()
	for range inFlight {
		wg.Go(func() {
			for i := range jobs {
				if failed.Load() {
					continue
				}
				sent := time.Now()
				delivered, err := s.c.SendSignalIdempotent(s.ctx, id, long.Signal, long.NewItem(i), key(i))
				if err != nil || !delivered {
					failed.Store(true)
					t.Errorf("signal %d: delivered %v, err %v", i, delivered, err)
					continue
				}
				at := time.Now()
				answers[answered.Add(1)-1] = answer{item: i, at: at, latency: at.Sub(sent)}
				if i%50 == 0 {
					// A retry of the same key: acknowledged, not appended.
					again, err := s.c.SendSignalIdempotent(s.ctx, id, long.Signal, long.NewItem(i), key(i))
					if err != nil || again {
						failed.Store(true)
						t.Errorf("signal %d sent again: delivered %v, err %v", i, again, err)
					}
				}
			}
		})
	}
	for i := range n {
		jobs <- i
	}
	close(jobs)
	wg.Wait()
	require.False(t, failed.Load(), "every signal answered delivered")
	sent := time.Since(begin)

	var res long.SignalsResult
	e, hist := s.finish(id, time.Minute+time.Duration(n)*5*time.Millisecond, &res)
	took := e.ClosedAt.Sub(begin)
	var digest uint64
	for i := range n {
		digest = long.Sum(digest, long.NewItem(i))
	}
	require.Equal(t, long.SignalsResult{Received: n, Distinct: n, SumI: int64(n) * int64(n-1) / 2, Digest: strconv.FormatUint(digest, 16)}, res,
		"every item exactly once, as sent")

	// Keys sent again after the close: still duplicates.
	for _, i := range []int{0, n / 2, n - 1} {
		delivered, err := s.c.SendSignalIdempotent(s.ctx, id, long.Signal, long.NewItem(i), key(i))
		require.NoError(t, err, "signal %d after the close", i)
		require.False(t, delivered, "signal %d after the close", i)
	}

	// The history: each key's SignalReceived once, and the tasks that saw
	// them.
	keys := map[string]int{}
	var signals, tasks []client.Event
	for _, ev := range hist {
		switch ev.Type {
		case "SignalReceived":
			k, _ := ev.Attrs["idempotency_key"].(string)
			keys[k]++
			signals = append(signals, ev)
		case "WorkflowTaskCompleted":
			tasks = append(tasks, ev)
		}
	}
	require.Len(t, signals, n, "SignalReceived events")
	require.Len(t, keys, n, "distinct keys among them")
	require.Equal(t, "Completed", e.Status)

	t.Logf("%d signals of about %d bytes, %d in flight: sent in %s (%.0f/s), execution closed %s after the first; "+
		"history %d events (%d SignalReceived, %d WorkflowTaskCompleted: %.1f signals a task), %d bytes; warning %v",
		n, long.ItemBytes, inFlight, sent.Round(time.Millisecond), float64(n)/sent.Seconds(), took.Round(time.Millisecond),
		e.HistoryLength, len(signals), len(tasks), float64(n)/float64(max(len(tasks), 1)), e.HistoryBytes, e.HistoryWarning != nil)

	// Per chunk of answers: the wall time and the calls' latency; per
	// chunk of signals in the history: the lag until a task saw them.
	lags := signalLags(t, signals, tasks)
	var b strings.Builder
	fmt.Fprintf(&b, "| signals | wall | signals/s | signal p50 | p99 | lag p50 | lag max | tasks |\n")
	prev := begin
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		var lat []time.Duration
		for _, a := range answers[from:to] {
			lat = append(lat, a.latency)
		}
		wall := answers[to-1].at.Sub(prev)
		prev = answers[to-1].at
		lag := slices.Clone(lags[from:to])
		slices.Sort(lag)
		seen := map[float64]bool{}
		for _, tk := range tasksSeeing(signals[from:to], tasks) {
			seen[tk] = true
		}
		fmt.Fprintf(&b, "| %d–%d | %s | %.0f | %s | %s | %s | %s | %d |\n", from+1, to, wall.Round(time.Millisecond),
			float64(to-from)/wall.Seconds(), pct(lat, 50), pct(lat, 99), lag[len(lag)/2].Round(time.Millisecond),
			lag[len(lag)-1].Round(time.Millisecond), len(seen))
	}
	t.Logf("per %d signals:\n%s", chunk, b.String())
}

// signalLags is, for each signal of the history, how long after its
// SignalReceived the WorkflowTaskCompleted of the first task that saw it
// (base_seq at or past it) was recorded.
func signalLags(t *testing.T, signals, tasks []client.Event) []time.Duration {
	t.Helper()
	lags := make([]time.Duration, len(signals))
	j := 0
	for i, sg := range signals {
		for j < len(tasks) && baseSeq(tasks[j]) < float64(sg.Seq) {
			j++
		}
		require.Less(t, j, len(tasks), "signal at seq %d: no task saw it", sg.Seq)
		lags[i] = tasks[j].At.Sub(sg.At)
	}
	return lags
}

// tasksSeeing is the task ids of the tasks that first saw each signal.
func tasksSeeing(signals, tasks []client.Event) []float64 {
	var out []float64
	j := 0
	for _, sg := range signals {
		for j < len(tasks) && baseSeq(tasks[j]) < float64(sg.Seq) {
			j++
		}
		if j < len(tasks) {
			out = append(out, tasks[j].Attrs["task_id"].(float64))
		}
	}
	return out
}

// baseSeq is a WorkflowTaskCompleted's base_seq: the last event its task
// saw.
func baseSeq(ev client.Event) float64 {
	v, _ := ev.Attrs["base_seq"].(float64)
	return v
}

// pct is the p-th percentile of ds, which it sorts.
func pct(ds []time.Duration, p int) time.Duration {
	slices.Sort(ds)
	return ds[min(len(ds)*p/100, len(ds)-1)].Round(100 * time.Microsecond)
}

// TestAWorkflowRunsManyActivities is issue 34's check "a workflow that
// runs 5,000 activities completes", at -long.activities: one execution
// of long_activities runs that many activities, -long.parallel at a time
// (a batch scheduled together, waited for together, then the next), and
// returns the sum of their results, which must be what each returns.
// The time per -long.chunk activities, from the history, is logged from
// the first to the last.
func TestAWorkflowRunsManyActivities(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler, ingest and a worker as processes")
	}
	n, parallel, chunk := *longActivities, max(*longParallel, 1), max(*longChunk, 1)
	s := startLongStack(t, 2*time.Minute+time.Duration(n)*20*time.Millisecond)
	begin := time.Now()
	id := s.start(long.WorkflowActivities, long.ActivitiesInput{Count: n, Parallel: parallel})
	var res long.ActivitiesResult
	e, hist := s.finish(id, 2*time.Minute+time.Duration(n)*20*time.Millisecond, &res)
	took := e.ClosedAt.Sub(begin)
	var sum int64
	for i := range n {
		sum += long.StepResult(i)
	}
	require.Equal(t, long.ActivitiesResult{Ran: n, Batches: (n + parallel - 1) / parallel, Sum: sum}, res)

	scheduled, completed := map[float64]bool{}, map[float64]bool{}
	var done []client.Event
	tasks := 0
	for _, ev := range hist {
		id, _ := ev.Attrs["activity_id"].(float64)
		switch ev.Type {
		case "ActivityScheduled":
			require.False(t, scheduled[id], "activity %v scheduled twice", id)
			scheduled[id] = true
		case "ActivityCompleted":
			require.True(t, scheduled[id], "activity %v completed before it was scheduled", id)
			require.False(t, completed[id], "activity %v completed twice", id)
			completed[id] = true
			done = append(done, ev)
		case "ActivityFailed":
			t.Errorf("an attempt failed: %s", ev.Raw)
		case "WorkflowTaskCompleted":
			tasks++
		}
	}
	require.Len(t, scheduled, n)
	require.Len(t, completed, n)
	t.Logf("%d activities, %d at a time: execution closed %s after its start (%.0f activities/s); "+
		"history %d events (%d WorkflowTaskCompleted), %d bytes; warning %v",
		n, parallel, took.Round(time.Millisecond), float64(n)/took.Seconds(), e.HistoryLength, tasks, e.HistoryBytes, e.HistoryWarning != nil)
	var b strings.Builder
	fmt.Fprintf(&b, "| activities | wall | activities/s |\n")
	prev := e.CreatedAt
	for from := 0; from < n; from += chunk {
		to := min(from+chunk, n)
		wall := done[to-1].At.Sub(prev)
		prev = done[to-1].At
		fmt.Fprintf(&b, "| %d–%d | %s | %.0f |\n", from+1, to, wall.Round(time.Millisecond), float64(to-from)/wall.Seconds())
	}
	t.Logf("per %d activities (their ActivityCompleted events):\n%s", chunk, b.String())
}

// TestAParentFansOutManyChildren is the check of child workflows
// at scale, at -long.children (skipped without it; the check is
// 500): one chaos_family parent (testdata/fleetworker) starts that many
// chaos_family_child children at once, each of which runs one activity,
// and returns their results in order. It must complete with every
// result, each child started and completed once in its history, its
// children listing must list them all Completed, and the executions of
// its workflow_id prefix must be exactly them, each naming it as its
// parent. The times from the parent's start until every child started,
// every child completed and the parent closed are logged.
//
//	go test -count=1 -run TestAParentFansOutManyChildren ./e2e -long.children 500 -timeout 30m -v
func TestAParentFansOutManyChildren(t *testing.T) {
	if testing.Short() {
		t.Skip("runs a scheduler, ingest and a worker as processes")
	}
	n := *longChildren
	if n <= 0 {
		t.Skip("pass -long.children N to run it (the issue's check: 500)")
	}
	within := 2*time.Minute + time.Duration(n)*200*time.Millisecond
	s := startLongStackOf(t, within, "fleetworker", "FLEET_NAMES=chaos_family")
	begin := time.Now()
	id := s.start("chaos_family", map[string]any{"family": "long", "children": n})
	type child struct {
		Index  int    `json:"index"`
		Square int    `json:"square"`
		Charge string `json:"charge"`
	}
	var res []child
	e, hist := s.finish(id, within, &res)
	took := e.ClosedAt.Sub(begin)
	require.Len(t, res, n, "one result per child")
	charges := map[string]bool{}
	for i, r := range res {
		require.Equal(t, child{Index: i, Square: i * i, Charge: r.Charge}, r, "result %d", i)
		require.NotEmpty(t, r.Charge, "result %d", i)
		charges[r.Charge] = true
	}
	require.Len(t, charges, n, "a charge of its own per child")

	// The history: each child initiated, started and completed once.
	count := map[float64]map[string]int{}
	var lastStarted, lastCompleted time.Time
	tasks := 0
	for _, ev := range hist {
		if ev.Type == "WorkflowTaskCompleted" {
			tasks++
		}
		if !strings.HasPrefix(ev.Type, "ChildWorkflow") {
			continue
		}
		cid, _ := ev.Attrs["child_id"].(float64)
		if count[cid] == nil {
			count[cid] = map[string]int{}
		}
		count[cid][ev.Type]++
		switch ev.Type {
		case "ChildWorkflowStarted":
			lastStarted = ev.At
		case "ChildWorkflowCompleted":
			lastCompleted = ev.At
		}
	}
	require.Len(t, count, n, "children in the history")
	for cid, c := range count {
		require.Equal(t, map[string]int{"ChildWorkflowInitiated": 1, "ChildWorkflowStarted": 1, "ChildWorkflowCompleted": 1}, c, "child %v", cid)
	}

	// The children listing, and the executions of the workflow_id
	// prefix: n distinct executions, Completed, naming the parent.
	listed, err := s.c.Children(s.ctx, id)
	require.NoError(t, err)
	require.Len(t, listed.Children, n, "children listed")
	fromListing := map[string]bool{}
	for _, ch := range listed.Children {
		require.Equal(t, "Completed", ch.Status, "child %d", ch.ChildID)
		require.Equal(t, id+"/child-"+strconv.Itoa(ch.ChildID), ch.WorkflowID, "child %d", ch.ChildID)
		fromListing[ch.ExecutionID] = true
	}
	require.Len(t, fromListing, n, "distinct child executions listed")
	byPrefix := map[string]bool{}
	for cursor := ""; ; {
		page, err := s.c.ListPage(s.ctx, client.ListOptions{WorkflowIDPrefix: id + "/", Limit: 500, Cursor: cursor})
		require.NoError(t, err)
		for _, x := range page.Executions {
			require.Equal(t, id, x.ParentExecutionID, "execution %s", x.ExecutionID)
			require.Equal(t, "Completed", x.Status, "execution %s", x.ExecutionID)
			require.False(t, byPrefix[x.ExecutionID], "execution %s listed twice", x.ExecutionID)
			byPrefix[x.ExecutionID] = true
		}
		if cursor = page.NextCursor; cursor == "" {
			break
		}
	}
	require.Equal(t, fromListing, byPrefix, "the executions of its workflow_id prefix are its children")

	t.Logf("a parent fanning out %d children (one activity each): every child started %s after the parent's start, every child completed %s after, "+
		"the parent closed %s after (%.0f children/s); its history %d events (%d WorkflowTaskCompleted), %d bytes; warning %v",
		n, lastStarted.Sub(begin).Round(time.Millisecond), lastCompleted.Sub(begin).Round(time.Millisecond), took.Round(time.Millisecond),
		float64(n)/took.Seconds(), e.HistoryLength, tasks, e.HistoryBytes, e.HistoryWarning != nil)
}
