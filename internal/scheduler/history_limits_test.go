package scheduler

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/wire"
)

func TestHistoryLimitsDefaultsAndValidate(t *testing.T) {
	t.Parallel()
	require.Equal(t, HistoryLimits{WarnEvents: 10_000, WarnBytes: 10 << 20, MaxEvents: 50_000, MaxBytes: 50 << 20,
		SuggestEvents: 4096, SuggestBytes: 4 << 20, UpdateMaxInFlight: 10, UpdateMaxPerRun: 2000}, HistoryLimits{}.WithDefaults())
	require.Equal(t, HistoryLimits{WarnEvents: 20, WarnBytes: 10 << 20, MaxEvents: 20, MaxBytes: 50 << 20, SuggestEvents: 20, SuggestBytes: 4 << 20,
		UpdateMaxInFlight: 10, UpdateMaxPerRun: 2000},
		HistoryLimits{MaxEvents: 20}.WithDefaults(), "unset thresholds are capped at the hard limit")
	require.NoError(t, HistoryLimits{}.Validate())
	require.NoError(t, HistoryLimits{MaxEvents: 20, MaxBytes: 100}.Validate())
	for _, bad := range []struct {
		l    HistoryLimits
		want string
	}{
		{HistoryLimits{MaxEvents: -1}, "MaxEvents -1: want a positive number"},
		{HistoryLimits{SuggestBytes: -1}, "SuggestBytes -1: want a positive number"},
		{HistoryLimits{UpdateMaxInFlight: -1}, "UpdateMaxInFlight -1: want a positive number"},
		{HistoryLimits{WarnEvents: 60_000}, "WarnEvents 60000 is above MaxEvents 50000"},
		{HistoryLimits{WarnBytes: 11, MaxBytes: 10}, "WarnBytes 11 is above MaxBytes 10"},
		{HistoryLimits{SuggestEvents: 11, MaxEvents: 10}, "SuggestEvents 11 is above MaxEvents 10"},
		{HistoryLimits{SuggestBytes: 11, MaxBytes: 10}, "SuggestBytes 11 is above MaxBytes 10"},
	} {
		require.ErrorContains(t, bad.l.Validate(), bad.want)
	}
	_, err := NewMemory(MemoryConfig{HistoryLimits: HistoryLimits{WarnEvents: 11, MaxEvents: 10}})
	require.ErrorContains(t, err, "WarnEvents 11 is above MaxEvents 10")
}

// limitsShard is a Memory with small history limits and one running
// execution of "grow", whose first workflow task is outstanding.
type limitsShard struct {
	m    *Memory
	now  time.Time
	id   string
	keys int
}

func newLimitsShard(t *testing.T, l HistoryLimits) *limitsShard {
	t.Helper()
	m, err := NewMemory(MemoryConfig{HistoryLimits: l})
	require.NoError(t, err)
	s := &limitsShard{m: m, now: time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)}
	start := startCmd("grow", "", "g1")
	out, err := m.Apply(context.Background(), s.now, &start)
	require.NoError(t, err)
	require.Len(t, out.WorkflowTasks, 1)
	s.id = out.WorkflowTasks[0].ExecutionID
	return s
}

// signal delivers a signal carrying payload: one event more.
func (s *limitsShard) signal(t *testing.T, payload string) Dispatched {
	t.Helper()
	s.keys++
	cmd := signalCmd(s.id, fmt.Sprintf("k%d", s.keys))
	cmd.Signal.Payload = json.RawMessage(payload)
	out, err := s.m.Apply(context.Background(), s.now, &cmd)
	require.NoError(t, err)
	return out
}

func (s *limitsShard) execution(t *testing.T) (store.Execution, []wire.Event) {
	t.Helper()
	e, events, ok := s.m.Execution(s.id)
	require.True(t, ok)
	return e, events
}

// sizeOf is the size of events as the scheduler counts it.
func sizeOf(events []wire.Event) int64 {
	var n int64
	for _, ev := range events {
		n += int64(len(ev.Type) + len(ev.Attrs))
	}
	return n
}

// An execution's history is counted as it grows, in events and bytes;
// once past a warning threshold the execution carries a warning, set
// once, with the limits, which its view shows with the counts as they
// stand.
func TestAHistoryPastItsWarningThresholdCarriesAWarning(t *testing.T) {
	t.Parallel()
	s := newLimitsShard(t, HistoryLimits{WarnEvents: 4, MaxEvents: 100})
	e, events := s.execution(t)
	require.Equal(t, 1, e.LastSeq)
	require.Equal(t, sizeOf(events), e.HistoryBytes)
	require.Positive(t, e.HistoryBytes)
	require.Nil(t, e.HistoryWarning)

	s.signal(t, `{"n":1}`)
	s.signal(t, `{"n":2}`)
	e, _ = s.execution(t)
	require.Equal(t, 3, e.LastSeq)
	require.Nil(t, e.HistoryWarning, "below the threshold")
	require.Nil(t, e.View().HistoryWarning)

	s.signal(t, `{"n":3}`)
	e, events = s.execution(t)
	require.Equal(t, 4, e.LastSeq)
	require.Equal(t, sizeOf(events), e.HistoryBytes)
	require.Equal(t, &api.HistoryWarning{WarnEvents: 4, WarnBytes: 10 << 20, MaxEvents: 100, MaxBytes: 50 << 20}, e.HistoryWarning)
	first := e.HistoryWarning

	s.signal(t, `{"n":4}`)
	e, events = s.execution(t)
	require.Same(t, first, e.HistoryWarning, "set once")
	view := e.View()
	require.Equal(t, 5, view.HistoryLength)
	require.Equal(t, sizeOf(events), view.HistoryBytes)
	w := view.HistoryWarning
	require.NotNil(t, w)
	require.Equal(t, 5, w.Events)
	require.Equal(t, sizeOf(events), w.Bytes)
	require.Equal(t, 4, w.WarnEvents)
	require.Equal(t, 100, w.MaxEvents)
	require.Contains(t, w.Message, "the history has 5 events")
	require.Contains(t, w.Message, "past the warning threshold of 4 events")
	require.Contains(t, w.Message, "at more than 100 events")
	require.Contains(t, w.Message, "HistoryLimitExceeded")
	require.Equal(t, wire.StatusRunning, e.Status)

	// The bytes threshold warns as well.
	s = newLimitsShard(t, HistoryLimits{WarnBytes: 600, MaxBytes: 10_000})
	s.signal(t, `{"blob":"`+strings.Repeat("x", 600)+`"}`)
	e, _ = s.execution(t)
	require.NotNil(t, e.HistoryWarning)
	require.EqualValues(t, 600, e.HistoryWarning.WarnBytes)
	require.Equal(t, wire.StatusRunning, e.Status)
}

// An execution whose history goes past its hard limit fails with
// HistoryLimitExceeded in the batch that took it there, with one event
// more, its message naming the limit; it takes no more events, and its
// workflow task's result is dropped.
func TestAHistoryPastItsLimitFailsTheExecution(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newLimitsShard(t, HistoryLimits{MaxEvents: 6})
	for i := range 5 {
		s.signal(t, fmt.Sprintf(`{"n":%d}`, i))
	}
	e, _ := s.execution(t)
	require.Equal(t, 6, e.LastSeq)
	require.Equal(t, wire.StatusRunning, e.Status, "at its limit, it runs")
	require.NotNil(t, e.HistoryWarning, "the warning threshold defaults to the limit")

	out := s.signal(t, `{"n":6}`)
	require.Empty(t, out.WorkflowTasks)
	require.Equal(t, []string{s.id}, out.Cancelled, "its running activities are told to stop")
	e, events := s.execution(t)
	require.Equal(t, wire.StatusFailed, e.Status)
	require.Equal(t, 8, e.LastSeq, "the signal, then the failure")
	require.Equal(t, wire.EventWorkflowFailed, events[len(events)-1].Type)
	require.Equal(t, sizeOf(events), e.HistoryBytes)
	var f wire.Failure
	require.NoError(t, json.Unmarshal(e.Error, &f))
	require.Equal(t, api.FailureHistoryLimitExceeded, f.Type)
	require.True(t, f.NonRetryable)
	require.Contains(t, f.Message, "7 events, more than its limit of 6 (history_max_events)")
	var closed wire.WorkflowClosedAttrs
	require.NoError(t, json.Unmarshal(events[len(events)-1].Attrs, &closed))
	require.Equal(t, f, *closed.Failure)
	_, ok := s.m.NextTimer()
	require.False(t, ok, "its workflow task's deadline went with it")

	// Closed, it takes nothing more: a signal is not delivered, the
	// outstanding task's result is dropped.
	out = s.signal(t, `{"n":7}`)
	require.False(t, out.Outcomes[0].SignalDelivered)
	_, err := s.m.Apply(ctx, s.now, &wire.Command{CommandID: dedup.WorkflowTaskCommandID(s.id, 1), Kind: wire.KindWorkflowTaskCompleted,
		WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: s.id, TaskID: 1, BaseSeq: 1}})
	require.NoError(t, err)
	e, _ = s.execution(t)
	require.Equal(t, 8, e.LastSeq)

	// The size limit, likewise.
	s = newLimitsShard(t, HistoryLimits{MaxBytes: 1000})
	s.signal(t, `{"blob":"`+strings.Repeat("x", 800)+`"}`)
	e, _ = s.execution(t)
	require.Equal(t, wire.StatusRunning, e.Status)
	s.signal(t, `{"blob":"`+strings.Repeat("y", 100)+`"}`)
	e, _ = s.execution(t)
	require.Equal(t, wire.StatusFailed, e.Status)
	require.NoError(t, json.Unmarshal(e.Error, &f))
	require.Equal(t, api.FailureHistoryLimitExceeded, f.Type)
	require.Contains(t, f.Message, "bytes, more than its limit of 1000 (history_max_bytes)")
}

// A start whose first event is past the limit fails at once.
func TestAStartPastTheLimitFails(t *testing.T) {
	t.Parallel()
	m, err := NewMemory(MemoryConfig{HistoryLimits: HistoryLimits{MaxBytes: 100}})
	require.NoError(t, err)
	start := startCmd("grow", "", "g1")
	start.Start.Input = json.RawMessage(`{"blob":"` + strings.Repeat("x", 200) + `"}`)
	out, err := m.Apply(context.Background(), time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC), &start)
	require.NoError(t, err)
	require.Empty(t, out.WorkflowTasks)
	e, events, ok := m.Execution(out.Outcomes[0].ExecutionID)
	require.True(t, ok)
	require.Equal(t, wire.StatusFailed, e.Status)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventWorkflowFailed}, []string{events[0].Type, events[1].Type})
}

// A workflow task says whether the history it carries is past the
// suggestion threshold, and what its worker reports is recorded in its
// WorkflowTaskCompleted, for a replay to read.
func TestAWorkflowTaskSuggestsContinueAsNew(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	s := newLimitsShard(t, HistoryLimits{SuggestEvents: 4})
	complete := func(task *wire.WorkflowTask) Dispatched {
		t.Helper()
		out, err := s.m.Apply(ctx, s.now, &wire.Command{CommandID: dedup.WorkflowTaskCommandID(s.id, task.TaskID), Kind: wire.KindWorkflowTaskCompleted,
			WorkflowTask: &wire.WorkflowTaskResult{ExecutionID: s.id, TaskID: task.TaskID, BaseSeq: task.History[len(task.History)-1].Seq,
				Time: task.Time, ContinueAsNewSuggested: task.ContinueAsNewSuggested}})
		require.NoError(t, err)
		return out
	}
	first := &wire.WorkflowTask{TaskID: 1, History: []wire.Event{{Seq: 1}}}
	s.signal(t, `{}`) // seq 2; the task is outstanding: the next follows its result
	out := complete(first)
	require.Len(t, out.WorkflowTasks, 1)
	second := out.WorkflowTasks[0]
	require.False(t, second.ContinueAsNewSuggested, "3 events: below 4")
	s.signal(t, `{}`) // seq 4
	out = complete(second)
	require.Len(t, out.WorkflowTasks, 1)
	third := out.WorkflowTasks[0]
	require.True(t, third.ContinueAsNewSuggested, "5 events: past 4")
	complete(third)
	_, events := s.execution(t)
	var recorded []bool
	for _, ev := range events {
		if ev.Type == wire.EventWorkflowTaskCompleted {
			var a wire.WorkflowTaskCompletedAttrs
			require.NoError(t, json.Unmarshal(ev.Attrs, &a))
			recorded = append(recorded, a.ContinueAsNewSuggested)
		}
	}
	require.Equal(t, []bool{false, false, true}, recorded)
}

// On PostgreSQL the history's size and warning are stored with the
// execution, and a batch counts the executions it took past a limit,
// once each, for the scheduler's metric.
func TestHistoryLimitsOnPostgreSQL(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db, l := leasedDB(t)
	env := applyEnv{shard: l.Shard, shards: 4, window: time.Hour, log: slog.New(slog.DiscardHandler),
		historyLimits: HistoryLimits{WarnEvents: 3, MaxEvents: 5}}
	seq := uint64(0)
	applyCmds := func(cmds ...wire.Command) *store.Writes {
		t.Helper()
		var batch []seqCommand
		for _, c := range cmds {
			seq++
			batch = append(batch, seqCommand{seq: seq, cmd: c})
		}
		var w *store.Writes
		require.NoError(t, pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			applied, err := store.LockShard(ctx, tx, "a", l)
			if err != nil {
				return err
			}
			if w, err = apply(ctx, tx, env, applied, batch); err != nil {
				return err
			}
			return store.Write(ctx, tx, w)
		}))
		return w
	}
	w := applyCmds(startCmd("grow", "", "g1"))
	id := w.NewExecutions[0].ExecutionID
	appended := w.Events
	require.Zero(t, w.HistoryCrossings)

	w = applyCmds(signalCmd(id, "k1"), signalCmd(id, "k2"))
	appended = append(appended, w.Events...)
	require.Equal(t, store.HistoryCrossings{Warned: 1}, w.HistoryCrossings)
	e, err := store.GetExecution(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, 3, e.LastSeq)
	require.Equal(t, &api.HistoryWarning{WarnEvents: 3, WarnBytes: 10 << 20, MaxEvents: 5, MaxBytes: 50 << 20}, e.HistoryWarning)
	require.NotNil(t, e.View().HistoryWarning)

	w = applyCmds(signalCmd(id, "k3"), signalCmd(id, "k4"), signalCmd(id, "k5"))
	appended = append(appended, w.Events...)
	require.Equal(t, store.HistoryCrossings{Exceeded: 1}, w.HistoryCrossings, "warned once, failed once")
	e, err = store.GetExecution(ctx, db, id)
	require.NoError(t, err)
	require.Equal(t, wire.StatusFailed, e.Status)
	require.Equal(t, 7, e.LastSeq, "the three signals, then the failure")
	var size int64
	for _, ev := range appended {
		size += int64(len(ev.Type) + len(ev.Attrs))
	}
	require.Equal(t, size, e.HistoryBytes)
	require.Contains(t, string(e.Error), api.FailureHistoryLimitExceeded)
	require.Equal(t, []string{wire.EventWorkflowStarted, wire.EventSignalReceived, wire.EventSignalReceived, wire.EventSignalReceived,
		wire.EventSignalReceived, wire.EventSignalReceived, wire.EventWorkflowFailed}, historyTypes(t, db, id))
	require.Zero(t, count(t, db, `SELECT count(*) FROM timers WHERE execution_id = $1`, id))
}
