package harvest

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// supersede runs the sim's next workflow task twice, as when two workers
// both ran it (a redelivery after a NATS kill, say): first on the sim's
// cache with cachedFn, whose result is then lost, and then on a fresh
// execution of takenFn, whose result the scheduler records. It returns
// what each decided. The cache keeps the execution that ran the lost
// result, and the next task is one it would run on from.
func supersede(t *testing.T, s *sim, cachedFn, takenFn workflowFunc) (cached, taken []wire.Decision) {
	t.Helper()
	s.taskID++
	task := func() *wire.WorkflowTask {
		return &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", TaskQueue: "default",
			TaskID: s.taskID, History: append([]wire.Event(nil), s.hist...), Time: s.now}
	}
	ran, err := s.cache.run(cachedFn, task(), s.opts)
	require.NoError(t, err)
	taken, err = runWorkflowTask(takenFn, task(), s.opts)
	require.NoError(t, err)
	s.record(len(s.hist), taken)
	return ran.Decisions, taken
}

// TestACachedExecutionThatDrewAnotherSideEffectValueReplays: a cached
// execution ran a task whose result was superseded by another run of
// the same task, which drew another value from SideEffect. The next task
// continues the cached execution's history, but the execution holds the
// value the history does not: it is replayed afresh, and what the
// workflow decides and returns follows the recorded value.
func TestACachedExecutionThatDrewAnotherSideEffectValueReplays(t *testing.T) {
	t.Parallel()
	drawn := 0
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		batch := SideEffect(ctx, func() string { drawn++; return fmt.Sprintf("batch-%d", drawn) })
		// The value is used only in a later task, where a cached
		// execution would go on with its own.
		if err := ExecuteActivity(ctx, "prepare", nil).Get(nil); err != nil {
			return "", err
		}
		if err := ExecuteActivity(ctx, "fanout", batch).Get(nil); err != nil {
			return "", err
		}
		return batch, nil
	})
	s := newSim(t, fn, struct{}{})
	cached, taken := supersede(t, s, fn, fn)
	require.JSONEq(t, `"batch-1"`, string(cached[0].Marker.Value), "the lost run drew batch-1")
	require.JSONEq(t, `"batch-2"`, string(taken[0].Marker.Value), "the recorded run drew batch-2")

	s.complete(1, nil)
	d := s.task()
	require.Equal(t, []string{"schedule_activity fanout"}, kinds(d))
	require.JSONEq(t, `"batch-2"`, string(d[0].Input), "the fanout takes the recorded batch, not the one the cached execution drew")
	s.complete(2, nil)
	s.task()
	require.JSONEq(t, `"batch-2"`, string(s.result()))
	require.Equal(t, 2, drawn, "no replay drew again")
}

// TestACachedExecutionThatTookAnotherVersionReplays: the same for
// GetVersion, where two builds ran the task during a rolling deploy: the
// cached execution's (which supports version 2) took version 2, the
// recorded run's (an older build) version 1. The next task, on the newer
// build's cache, replays and follows version 1; it does not fail the task
// as non-deterministic, nor go on with version 2.
func TestACachedExecutionThatTookAnotherVersionReplays(t *testing.T) {
	t.Parallel()
	build := func(maxV int) workflowFunc {
		return registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
			v := GetVersion(ctx, "batching", DefaultVersion, maxV)
			if err := ExecuteActivity(ctx, "prepare", nil).Get(nil); err != nil {
				return 0, err
			}
			if err := ExecuteActivity(ctx, fmt.Sprintf("fanout_v%d", v), nil).Get(nil); err != nil {
				return 0, err
			}
			return v, nil
		})
	}
	s := newSim(t, build(2), struct{}{})
	cached, taken := supersede(t, s, build(2), build(1))
	require.Equal(t, &wire.VersionMarkerAttrs{ChangeID: "batching", Version: 2}, cached[0].Version, "the lost run took version 2")
	require.Equal(t, &wire.VersionMarkerAttrs{ChangeID: "batching", Version: 1}, taken[0].Version, "the recorded run took version 1")

	s.complete(1, nil)
	d := s.task()
	require.Equal(t, []string{"schedule_activity fanout_v1"}, kinds(d), "the recorded version's path, not the cached one's")
	s.complete(2, nil)
	s.task()
	require.JSONEq(t, `1`, string(s.result()))
}

// TestACachedExecutionThatSawLessThanTheRecordedTaskReplays: a worker
// ran task 1 on its cache over the history as first dispatched; the task
// was dispatched again with a signal that came meanwhile, and that copy's
// result was recorded (its base_seq past the cached run's). The next task
// continues the cached execution's last event, but the recorded task saw
// more than it did: it is replayed afresh, and decides as the history
// says, not as a non-determinism.
func TestACachedExecutionThatSawLessThanTheRecordedTaskReplays(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		// What the first task decides depends on whether the signal had
		// come when it ran.
		var v string
		ok, err := GetSignalChannel(ctx, "go").ReceiveAsync(&v)
		if err != nil {
			return "", err
		}
		name := "late"
		if ok {
			name = "early"
		}
		if err := ExecuteActivity(ctx, name, nil).Get(nil); err != nil {
			return "", err
		}
		return name, nil
	})
	s := newSim(t, fn, struct{}{})
	s.taskID++
	task := func() *wire.WorkflowTask {
		return &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", TaskQueue: "default",
			TaskID: s.taskID, History: append([]wire.Event(nil), s.hist...), Time: s.now}
	}
	ran, err := s.cache.run(fn, task(), s.opts) // the first copy, on the cache: no signal yet
	require.NoError(t, err)
	require.Equal(t, []string{"schedule_activity late"}, kinds(ran.Decisions))
	s.signal("go", "now")
	taken, err := runWorkflowTask(fn, task(), s.opts) // the copy dispatched again, whose result is taken
	require.NoError(t, err)
	require.Equal(t, []string{"schedule_activity early"}, kinds(taken))
	s.record(len(s.hist), taken)

	s.complete(1, nil)
	d := s.task()
	require.Equal(t, []string{"complete_workflow"}, kinds(d))
	require.JSONEq(t, `"early"`, string(s.result()))
}
