package workerrt_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// registerSum registers sum: it adds up n signals "v".
func registerSum(w *harvest.Worker) {
	harvest.RegisterWorkflow(w, "sticky_sum", func(ctx *harvest.WorkflowContext, n int) (int, error) {
		total := 0
		for range n {
			v, err := harvest.NewSignal[int]("v").Receive(ctx)
			if err != nil {
				return 0, err
			}
			total += v
		}
		return total, nil
	})
}

// sumWorker starts a worker of sum with its own metrics.
func sumWorker(t *testing.T, s *devstack.Stack) (*harvest.Worker, *prometheus.Registry) {
	t.Helper()
	reg := prometheus.NewRegistry()
	w, err := harvest.NewWorker(harvest.WorkerConfig{NATS: s.NC(), Metrics: reg, ShutdownGrace: 5 * time.Second, WorkflowTaskConcurrency: 1})
	require.NoError(t, err)
	registerSum(w)
	require.NoError(t, w.Start(t.Context()))
	t.Cleanup(func() { _ = w.Stop(context.Background()) })
	return w, reg
}

func cacheCount(t *testing.T, reg *prometheus.Registry, result string) int {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "harvest_worker_workflow_cache_total" {
			continue
		}
		n := 0
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == result {
					n += int(m.GetCounter().GetValue())
				}
			}
		}
		return n
	}
	return 0
}

// TestTasksStickToTheWorkerThatHoldsTheirExecution: with two workers of
// a workflow, an execution's workflow tasks after its first go to the
// worker that ran its last one and keeps it in its cache (sticky), so
// that nearly every task runs on from the cache instead of replaying the
// history on the other worker; and when that worker stops, its
// executions' tasks move to the other one within the sticky timeout, and
// complete.
func TestTasksStickToTheWorkerThatHoldsTheirExecution(t *testing.T) {
	t.Parallel()
	s := stacktest.Start(t, devstack.Config{})
	first, firstReg := sumWorker(t, s)
	_, secondReg := sumWorker(t, s)
	c, ctx := stacktest.Client(t, s)

	const executions, signals = 8, 10
	var ids []string
	for i := range executions {
		res, err := c.Start(ctx, "sticky_sum", signals+1, client.StartOptions{WorkflowID: fmt.Sprint("sum-", i)})
		require.NoError(t, err)
		ids = append(ids, res.ExecutionID)
	}
	// One signal after the other, each once its task has run: every task
	// but an execution's first could go to either worker.
	waitTasks := func(id string, n int) {
		t.Helper()
		probe.Until(t, 30*time.Second, fmt.Sprintf("%d workflow tasks of %s", n, id), func() bool {
			hist, err := c.History(ctx, id)
			require.NoError(t, err)
			done := 0
			for _, ev := range hist {
				if ev.Type == "WorkflowTaskCompleted" {
					done++
				}
			}
			return done >= n
		})
	}
	for k := range signals {
		for _, id := range ids {
			require.NoError(t, c.SendSignal(ctx, id, "v", 1))
		}
		for _, id := range ids {
			waitTasks(id, k+2)
		}
	}
	hits := cacheCount(t, firstReg, "hit") + cacheCount(t, secondReg, "hit")
	misses := cacheCount(t, firstReg, "miss") + cacheCount(t, secondReg, "miss")
	t.Logf("cache: %d hits, %d misses", hits, misses)
	// Each execution's first task is a miss; a task that the other worker
	// took (a sticky task moved) is one more.
	require.LessOrEqual(t, misses, executions+2, "tasks went to the worker that holds their execution")
	require.GreaterOrEqual(t, hits, executions*signals-2)

	// The first worker stops: the tasks of the executions it held move to
	// the second, and every execution completes.
	require.NoError(t, first.Stop(ctx))
	for _, id := range ids {
		require.NoError(t, c.SendSignal(ctx, id, "v", 1))
	}
	for _, id := range ids {
		var total int
		wctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		_, err := c.WaitResult(wctx, id, &total)
		cancel()
		require.NoError(t, err)
		require.Equal(t, signals+1, total)
	}
	moved := probe.Value(t, probe.Scrape(t, s.URL()+"/metrics"), "harvest_scheduler_sticky_tasks_moved_total")
	t.Logf("sticky tasks moved: %v", moved)
	if cacheCount(t, firstReg, "hit") > 0 {
		require.GreaterOrEqual(t, moved, 1.0, "the stopped worker held executions: their tasks moved")
	}
}
