package harvest

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// slowOrFast starts slow, sleeps 5 s and, if slow has not finished,
// tells someone and waits: the first reproduction of issue 29, whose
// replay once took the other branch.
func slowOrFast(ctx *WorkflowContext, _ struct{}) (string, error) {
	slow := ExecuteActivity(ctx, "slow", nil)
	if err := Sleep(ctx, 5*time.Second); err != nil {
		return "", err
	}
	branch := "fast"
	if !slow.IsReady() {
		branch = "slow"
		if err := ExecuteActivity(ctx, "notify_slow", nil).Get(nil); err != nil {
			return "", err
		}
	}
	if err := slow.Get(nil); err != nil {
		return "", err
	}
	return branch, nil
}

// TestIsReadySeesTheHistoryAsTheTaskSawIt: a replay reads IsReady where
// the first run read it, with the history that run had; slow's result,
// recorded later, does not change the branch taken.
func TestIsReadySeesTheHistoryAsTheTaskSawIt(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(slowOrFast), nil)
	require.Equal(t, []string{"schedule_activity slow", wire.DecisionStartTimer}, kinds(s.task()))
	s.fire(1)
	require.Equal(t, []string{"schedule_activity notify_slow"}, kinds(s.task()), "slow is not done at 5 s")
	s.complete(1, nil)
	s.complete(2, nil)
	s.task()
	require.JSONEq(t, `"slow"`, string(s.result()))
	// Every replay of the whole history agrees.
	_, err := s.replay(registered(slowOrFast))
	require.NoError(t, err)
}

// TestWhatArrivesDuringATaskIsSeenByTheNext: a signal recorded while a
// task ran (before its WorkflowTaskCompleted) is not there for that
// task's replay.
func TestWhatArrivesDuringATaskIsSeenByTheNext(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]string, error) {
		var seen []string
		ch := GetSignalChannel(ctx, "poke")
		for range 3 {
			if ch.HasPending() {
				seen = append(seen, "poked")
				_ = ch.Receive(nil)
			} else {
				seen = append(seen, "quiet")
			}
			if err := Sleep(ctx, time.Second); err != nil {
				return nil, err
			}
		}
		return seen, nil
	})
	s := newSim(t, fn, nil)
	s.task(func() { s.signal("poke", 1) })
	s.fire(1)
	s.task()
	s.fire(2)
	s.task()
	s.fire(3)
	s.task()
	require.JSONEq(t, `["quiet","poked","quiet"]`, string(s.result()))
}

// TestDeferRunsOnceWhenTheWorkflowReturns: the workflow function runs on
// across its tasks, never unwound: its deferred function runs once, at
// the return, and a deferred workflow call (the saga idiom) decides once
// and leaves no goroutine behind.
func TestDeferRunsOnceWhenTheWorkflowReturns(t *testing.T) {
	t.Parallel()
	deferred := 0
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (out string, err error) {
		defer func() {
			deferred++
			if err == nil {
				ExecuteActivity(ctx, "cleanup", nil)
			}
		}()
		for _, step := range []string{"a", "b", "c"} {
			if err := ExecuteActivity(ctx, step, nil).Get(nil); err != nil {
				return "", err
			}
		}
		return "done", nil
	})
	cache := newWorkflowCache(10, nil)
	defer cache.close()
	var hist []wire.Event
	add := func(typ string, attrs any) {
		raw, _ := json.Marshal(attrs)
		hist = append(hist, wire.Event{Seq: len(hist) + 1, Type: typ, Attrs: raw})
	}
	add(wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})
	opts := wire.ActivityOptions{Retry: wire.DefaultRetryPolicy()}
	for id := 1; id <= 3; id++ {
		ran, err := cache.run(fn, &wire.WorkflowTask{ExecutionID: "e", TaskID: id, History: append([]wire.Event(nil), hist...)}, nil)
		require.NoError(t, err)
		d := ran.Decisions
		require.Equal(t, id > 1, ran.Cached, "the first task replays; the others run on")
		require.Len(t, d, 1)
		add(wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: id, BaseSeq: len(hist)})
		add(wire.EventActivityScheduled, wire.ActivityScheduledAttrs{ActivityID: id, ActivityName: d[0].ActivityName, Input: d[0].Input, Options: opts})
		add(wire.EventActivityCompleted, wire.ActivityClosedAttrs{ActivityID: id, ActivityName: d[0].ActivityName, Attempt: 1})
		require.Zero(t, deferred, "not before the workflow returns")
		require.Equal(t, 1, cache.len(), "the execution waits in the cache, its code parked")
	}
	ran, err := cache.run(fn, &wire.WorkflowTask{ExecutionID: "e", TaskID: 4, History: hist}, nil)
	require.NoError(t, err)
	require.True(t, ran.Cached)
	require.Equal(t, 3, ran.Events, "the task consumed only what the last one did not see: task 3 recorded, its activity, its result")
	require.Equal(t, []string{"schedule_activity cleanup", wire.DecisionCompleteWorkflow}, kinds(ran.Decisions))
	require.Equal(t, 1, deferred, "once, when the workflow function returned")
	require.Zero(t, cache.len(), "a workflow that returned leaves the cache, and its goroutines end")
}

// TestAnEvictedWorkflowsDeferredCallsDecideNothing: a workflow ended in
// the middle (evicted, its worker stopping) runs its deferred functions
// with workflow calls that neither decide nor block, and its goroutines
// end; its next task replays.
func TestAnEvictedWorkflowsDeferredCallsDecideNothing(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		defer func() {
			// A blocking call in a deferred function of an evicted
			// workflow ends its goroutine.
			_ = ExecuteActivity(ctx, "compensate", nil).Get(nil)
			panic("not reached")
		}()
		Go(ctx, func(ctx *WorkflowContext) { _ = NewSignal[int]("never").Channel(ctx).Receive(nil) })
		return "", ExecuteActivity(ctx, "a", nil).Get(nil)
	})
	s := newSim(t, fn, nil)
	require.Equal(t, []string{"schedule_activity a"}, kinds(s.task()))
	s.cache.close() // goleak (TestMain) checks that every goroutine ended
}

// TestWorkflowGoroutinesAndChannels: goroutines started with Go and
// channels between them run deterministically: the same interleaving,
// hence the same decisions, on every replay.
func TestWorkflowGoroutinesAndChannels(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, n int) ([]int, error) {
		results := NewChannel[int](ctx)
		for i := range n {
			Go(ctx, func(ctx *WorkflowContext) {
				var v int
				if err := ExecuteActivity(ctx, "square", i).Get(&v); err != nil {
					v = -1
				}
				results.Send(ctx, v)
			})
		}
		var got []int
		for range n {
			v, _ := results.Receive(ctx)
			got = append(got, v)
		}
		return got, nil
	})
	s := newSim(t, fn, 3)
	d := s.task()
	require.Len(t, d, 3, "three goroutines schedule their activities in one task")
	// Results come in another order than the activities were started.
	s.complete(3, 4)
	s.task()
	s.complete(1, 0)
	s.complete(2, 1)
	s.task()
	require.JSONEq(t, `[4,0,1]`, string(s.result()))
}

func TestBufferedChannelAndSelect(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]string, error) {
		ch := NewBufferedChannel[string](ctx, 2)
		ch.Send(ctx, "x")
		require.True(t, ch.SendAsync("y"))
		require.False(t, ch.SendAsync("z"), "full")
		var got []string
		sel := NewSelector(ctx)
		sel.AddChannel(ch, func() { v, _ := ch.Receive(ctx); got = append(got, v) })
		sel.AddDefault(func() { got = append(got, "default") })
		for range 3 {
			sel.Select()
		}
		v, ok := ch.ReceiveAsync()
		require.False(t, ok)
		require.Empty(t, v)
		ch.Close()
		_, more := ch.Receive(ctx)
		require.False(t, more)
		return got, nil
	})
	s := newSim(t, fn, nil)
	s.task()
	require.JSONEq(t, `["x","y","default"]`, string(s.result()))
}

func TestAwaitAndAwaitWithTimeout(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]bool, error) {
		approved := false
		Go(ctx, func(ctx *WorkflowContext) {
			_ = GetSignalChannel(ctx, "approve").Receive(nil)
			approved = true
		})
		ok1, _ := AwaitWithTimeout(ctx, time.Minute, func() bool { return approved })
		ok2, _ := AwaitWithTimeout(ctx, time.Minute, func() bool { return false })
		return []bool{ok1, ok2}, Await(ctx, func() bool { return approved })
	})
	s := newSim(t, fn, nil)
	require.Equal(t, []string{wire.DecisionStartTimer}, kinds(s.task()))
	s.signal("approve", nil)
	require.Equal(t, []string{wire.DecisionCancelTimer, wire.DecisionStartTimer}, kinds(s.task()), "the first wait's timer is cancelled")
	s.fire(2)
	s.task()
	require.JSONEq(t, `[true,false]`, string(s.result()))
}

// TestSideEffectRunsOnce: a side effect's function runs once, its value
// recorded; replays return the recorded value.
func TestSideEffectRunsOnce(t *testing.T) {
	t.Parallel()
	calls := 0
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		id := SideEffect(ctx, func() string { calls++; return "id-x" })
		if err := ExecuteActivity(ctx, "use", id).Get(nil); err != nil {
			return "", err
		}
		return id, nil
	})
	s := newSim(t, fn, nil)
	d := s.task()
	require.Equal(t, []string{wire.DecisionRecordMarker, "schedule_activity use"}, kinds(d))
	require.JSONEq(t, `"id-x"`, string(d[0].Marker.Value))
	callsAfterFirst := calls
	s.complete(1, nil)
	s.task()
	require.JSONEq(t, `"id-x"`, string(s.result()), "the replay returned the recorded value")
	require.Equal(t, 2, callsAfterFirst, "once by the replay, once by the cached execution: each first run")
	require.Equal(t, 2, calls, "no replay ran it again")
}

// TestNowIsTheTaskTime: Now is the time of the workflow task, the same
// when it is replayed later.
func TestNowIsTheTaskTime(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) ([]time.Time, error) {
		first := Now(ctx)
		if err := Sleep(ctx, time.Hour); err != nil {
			return nil, err
		}
		return []time.Time{first, Now(ctx)}, nil
	})
	s := newSim(t, fn, nil)
	began := s.now
	s.task()
	s.advance(time.Hour)
	s.fire(1)
	s.advance(time.Second) // the task runs a second after the timer fired
	s.task()
	var got []time.Time
	require.NoError(t, json.Unmarshal(s.result(), &got))
	require.Equal(t, []time.Time{began, began.Add(time.Hour + time.Second)}, got)
	_, err := s.replay(fn)
	require.NoError(t, err, "a replay an hour later decides the same")
}

// TestACancelledTimerNeverFires: a cancelled timer's TimerFired, recorded
// before the cancellation was applied, is not seen.
func TestACancelledTimerNeverFires(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (bool, error) {
		timer := NewTimer(ctx, time.Second)
		_ = GetSignalChannel(ctx, "go").Receive(nil)
		timer.Cancel()
		if err := Sleep(ctx, time.Minute); err != nil {
			return false, err
		}
		return timer.IsReady(), nil
	})
	s := newSim(t, fn, nil)
	s.task()
	s.signal("go", nil)
	require.Equal(t, []string{wire.DecisionCancelTimer, wire.DecisionStartTimer}, kinds(s.task(func() { s.fire(1) })))
	s.fire(2)
	s.task()
	require.JSONEq(t, `false`, string(s.result()))
}

// TestTheLoggerIsSilentOnReplay: a line logged in workflow code is
// written once, when the code first runs past it, with the execution's
// attributes.
func TestTheLoggerIsSilentOnReplay(t *testing.T) {
	t.Parallel()
	var buf bytes.Buffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (bool, error) {
		ctx.Logger().Info("before", "replaying", IsReplaying(ctx))
		if err := Sleep(ctx, time.Second); err != nil {
			return false, err
		}
		ctx.Logger().Info("after", "replaying", IsReplaying(ctx))
		return IsReplaying(ctx), nil
	})
	hist := []wire.Event{ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})}
	task := func(id int) []wire.Decision {
		x := newExecution(fn, &wire.WorkflowTask{ExecutionID: "e-1", WorkflowName: "wf", WorkflowID: "w-1"}, nil, log)
		defer x.close()
		d, err := x.runTask(&wire.WorkflowTask{TaskID: id, History: hist})
		require.NoError(t, err)
		return d
	}
	task(1)
	hist = append(hist,
		ev(t, 2, wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: 1, BaseSeq: 1}),
		ev(t, 3, wire.EventTimerStarted, wire.TimerAttrs{TimerID: 1, DurationMS: 1000}),
		ev(t, 4, wire.EventTimerFired, wire.TimerAttrs{TimerID: 1}))
	d := task(2)
	require.JSONEq(t, `false`, string(d[0].Result))
	out := buf.String()
	require.Equal(t, 1, strings.Count(out, "msg=before"), out)
	require.Equal(t, 1, strings.Count(out, "msg=after"), out)
	require.NotContains(t, out, "replaying=true")
	require.Contains(t, out, "execution_id=e-1 workflow=wf workflow_id=w-1")
}

func TestInfoSaysWhereTheExecutionStands(t *testing.T) {
	t.Parallel()
	var infos []WorkflowInfo
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		infos = append(infos, ctx.Info())
		if err := Sleep(ctx, time.Second); err != nil {
			return 0, err
		}
		infos = append(infos, ctx.Info())
		return 0, nil
	})
	s := newSim(t, fn, nil)
	started := s.now
	x := newExecution(fn, &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", TaskQueue: "default"}, nil, nil)
	defer x.close()
	_, err := x.runTask(&wire.WorkflowTask{TaskID: 1, History: s.hist})
	require.NoError(t, err)
	s.task()
	s.fire(1)
	infos = nil
	_, err = s.replay(fn)
	require.NoError(t, err)
	require.Len(t, infos, 2)
	require.Equal(t, WorkflowInfo{ExecutionID: "exec-1", WorkflowName: "wf", WorkflowID: "wf-1", StartTime: started, Attempt: 1,
		HistoryLength: 1, HistorySize: infos[0].HistorySize}, infos[0])
	require.Equal(t, 4, infos[1].HistoryLength, "started, task, timer started, fired")
	require.Greater(t, infos[1].HistorySize, infos[0].HistorySize)
}

// TestATaskThatDoesNotContinueTheCacheReplays: a task the cached
// execution did not lead to (a redelivery of the task it ran, or one
// after a result that was not taken) replays on a fresh execution.
func TestATaskThatDoesNotContinueTheCacheReplays(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(twoSteps), 1)
	s.task()
	again := &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", TaskID: s.taskID, History: s.hist[:1]}
	ran, err := s.cache.run(s.fn, again, nil)
	require.NoError(t, err, "the same task delivered again")
	require.False(t, ran.Cached, "it replays")
	require.Equal(t, []string{"schedule_activity a"}, kinds(ran.Decisions))
	// The cached execution ran task 1 again; its result is the one taken.
	s.complete(1, 2)
	s.task()
	// A result the scheduler did not take: the next task's history lacks
	// it, and the cached execution cannot go on.
	s.taskID++
	lost := &wire.WorkflowTask{ExecutionID: "exec-1", WorkflowName: "wf", TaskID: s.taskID, History: s.hist}
	_, err = s.cache.run(s.fn, lost, nil)
	require.NoError(t, err)
	s.complete(2, "z")
	d := s.task()
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"z"`)}}, d)
}

type chargeIn struct {
	AmountCents int `json:"amount_cents"`
}

type chargeOut struct {
	ChargeID string `json:"charge_id"`
}

var chargeCard = NewActivity[chargeIn, chargeOut]("charge_card")

// TestTypedActivities: a typed activity registers and runs under its
// name, and its future gives the typed result.
func TestTypedActivities(t *testing.T) {
	t.Parallel()
	w := newWorker(WorkerConfig{}.WithDefaults())
	chargeCard.Register(w, func(_ *ActivityContext, in chargeIn) (chargeOut, error) { return chargeOut{ChargeID: "ch_1"}, nil },
		ActivityOptions{StartToClose: time.Minute})
	require.True(t, w.hasActivity("charge_card"))
	require.Equal(t, time.Minute, w.activityOptions["charge_card"].StartToClose)

	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		f := chargeCard.Execute(ctx, chargeIn{AmountCents: 500})
		NewSelector(ctx).AddFuture(f.Future, func(*Future) {}).Select()
		out, err := f.Get()
		return out.ChargeID, err
	}), nil)
	d := s.task()
	require.Equal(t, "charge_card", d[0].ActivityName)
	require.JSONEq(t, `{"amount_cents": 500}`, string(d[0].Input))
	s.complete(1, chargeOut{ChargeID: "ch_9"})
	s.task()
	require.JSONEq(t, `"ch_9"`, string(s.result()))
}

// TestAnUnrecordableSideEffectFailsItsTask: a side effect whose value
// PostgreSQL could not store (a U+0000) fails the workflow task, naming
// the call, instead of sending a result the scheduler must set aside.
func TestAnUnrecordableSideEffectFailsItsTask(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		return SideEffect(ctx, func() string { return "a\x00b" }), nil
	}), nil)
	_, err := s.tryTask()
	require.ErrorContains(t, err, "SideEffect 1: the value cannot be recorded")
}

// TestTheCacheLetsTheLeastRecentlyUsedGo: beyond its size the cache ends
// the execution used least recently (its goroutines end: goleak), whose
// next task replays; the others run on.
func TestTheCacheLetsTheLeastRecentlyUsedGo(t *testing.T) {
	t.Parallel()
	cache := newWorkflowCache(2, nil)
	defer cache.close()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		if err := Sleep(ctx, time.Hour); err != nil {
			return 0, err
		}
		return 1, nil
	})
	started := ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})
	run := func(id string, taskID int, hist ...wire.Event) bool {
		t.Helper()
		ran, err := cache.run(fn, &wire.WorkflowTask{ExecutionID: id, TaskID: taskID, History: append([]wire.Event{started}, hist...)}, nil)
		require.NoError(t, err)
		return ran.Cached
	}
	for _, id := range []string{"a", "b", "c"} {
		require.False(t, run(id, 1))
	}
	require.Equal(t, 2, cache.len())
	recorded := []wire.Event{
		ev(t, 2, wire.EventWorkflowTaskCompleted, wire.WorkflowTaskCompletedAttrs{TaskID: 1, BaseSeq: 1}),
		ev(t, 3, wire.EventTimerStarted, wire.TimerAttrs{TimerID: 1, DurationMS: 3600000}),
		ev(t, 4, wire.EventTimerFired, wire.TimerAttrs{TimerID: 1}),
	}
	require.True(t, run("c", 2, recorded...), "the most recent runs on")
	require.False(t, run("a", 2, recorded...), "the least recent was let go, and replays")
}
