package scheduler

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

// FuzzContinueAsNewCarry applies a continue_as_new decision whose
// carry_signals are fuzzed (negative, zero, duplicated, unsorted, past
// the history, pointing at any event), from a task whose base_seq is
// fuzzed too (0 to two past the history), on an execution whose history
// mixes keyed signals with other events: its start, its workflow tasks'
// WorkflowTaskCompleted, a marker and a timer, and optionally a marker
// decided just before the continue_as_new. The kit's shard
// (scheduler.Memory) runs the scheduler's apply:
//   - nothing panics, and the run closes ContinuedAsNew, linked to a new
//     run, its closing event carrying no carry_signals;
//   - the new run's history is its WorkflowStarted, then only
//     SignalReceived events: no other event is ever carried;
//   - those are, in the order the run received them and each once, the
//     run's signals after base_seq and those of carry_signals at or
//     before it: a seq that is no signal, or not in (0, base_seq], moves
//     nothing.
//
// Each byte of carry is a seq: int8(b), with 0x7f for math.MaxInt and
// 0x80 for math.MinInt.
func FuzzContinueAsNewCarry(f *testing.F) {
	f.Add([]byte{}, uint8(255), uint8(0))
	f.Add([]byte{2, 3}, uint8(255), uint8(0x15))
	f.Add([]byte{3, 2, 2, 3}, uint8(255), uint8(0x15))
	f.Add([]byte{1, 4, 5, 6, 7, 8}, uint8(255), uint8(0x3f))
	f.Add([]byte{0, 0xff, 0xfe, 0x80, 0x7f}, uint8(255), uint8(0x2a))
	f.Add([]byte{30, 40, 100, 127 - 1}, uint8(3), uint8(0x7f))
	f.Add([]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15}, uint8(0), uint8(0x7f))
	f.Add([]byte{5, 9, 13}, uint8(1), uint8(0x55))
	f.Add([]byte{2}, uint8(200), uint8(0xff))

	f.Fuzz(func(t *testing.T, carryBytes []byte, baseChoice uint8, shape uint8) {
		carry := make([]int, len(carryBytes))
		for i, b := range carryBytes {
			switch b {
			case 0x7f:
				carry[i] = math.MaxInt
			case 0x80:
				carry[i] = math.MinInt
			default:
				carry[i] = int(int8(b))
			}
		}
		m, err := NewMemory(MemoryConfig{})
		require.NoError(t, err)
		now := time.Date(2026, 12, 6, 12, 0, 0, 0, time.UTC)
		n := 0
		apply := func(cmd *wire.Command) Dispatched {
			t.Helper()
			n++
			cmd.CommandID = fmt.Sprintf("c%d", n)
			d, err := m.Apply(t.Context(), now, cmd)
			require.NoError(t, err)
			return d
		}
		d := apply(&wire.Command{Kind: wire.KindStart, Start: &wire.StartCommand{WorkflowName: "loop", WorkflowID: "loop-1", TaskQueue: "default"}})
		require.Len(t, d.WorkflowTasks, 1)
		id := d.WorkflowTasks[0].ExecutionID
		signals := 0
		signal := func(count int) {
			for range count {
				signals++
				out := apply(&wire.Command{Kind: wire.KindSignal, Signal: &wire.SignalCommand{ExecutionID: id, SignalName: "n",
					Payload: json.RawMessage(fmt.Sprint(signals)), IdempotencyKey: fmt.Sprintf("k%d", signals)}}).Outcomes
				require.Len(t, out, 1)
				require.True(t, out[0].SignalDelivered)
			}
		}
		// complete completes the outstanding task with base_seq base.
		complete := func(base int, decisions ...wire.Decision) {
			e, _, ok := m.Execution(id)
			require.True(t, ok)
			require.True(t, e.WFTOutstanding)
			apply(&wire.Command{Kind: wire.KindWorkflowTaskCompleted, WorkflowTask: &wire.WorkflowTaskResult{
				ExecutionID: id, TaskID: e.WFTID, BaseSeq: base, Decisions: decisions}})
		}
		lastSeq := func() int {
			e, _, _ := m.Execution(id)
			return e.LastSeq
		}
		marker := func(id int) wire.Decision {
			return wire.Decision{Type: wire.DecisionRecordMarker, Marker: &wire.MarkerAttrs{Kind: wire.MarkerSideEffect, MarkerID: id, Value: json.RawMessage(`1`)}}
		}

		// Signals while task 1 runs, which saw only the start; it records a
		// marker and starts a timer. Task 2 follows for the signals.
		signal(int(shape & 3))
		complete(1, marker(1), wire.Decision{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 3_600_000})
		if e, _, _ := m.Execution(id); !e.WFTOutstanding {
			signal(1) // no signal came during task 1: one dispatches task 2
		}
		// Signals while task 2 runs; it sees the history as it was
		// dispatched, and decides nothing.
		seen := lastSeq()
		signal(int(shape >> 2 & 3))
		complete(seen)
		if e, _, _ := m.Execution(id); !e.WFTOutstanding {
			signal(1)
		}
		// Task 3 continues as new; signals come while it runs.
		taskBase := lastSeq()
		signal(int(shape >> 4 & 3))
		base := min(int(baseChoice), lastSeq()+2)
		var decisions []wire.Decision
		if shape&64 != 0 {
			decisions = append(decisions, marker(2))
		}
		decisions = append(decisions, wire.Decision{Type: wire.DecisionContinueAsNew,
			ContinueAsNew: &wire.ContinueAsNewAttrs{Input: json.RawMessage(`2`), Carry: carry}})
		_, before, _ := m.Execution(id)
		complete(base, decisions...)

		old, oldHist, ok := m.Execution(id)
		require.True(t, ok)
		require.Equal(t, wire.StatusContinuedAsNew, old.Status, "base %d (the task saw %d), carry %v", base, taskBase, carry)
		closing := oldHist[len(oldHist)-1]
		require.Equal(t, wire.EventWorkflowContinuedAsNew, closing.Type)
		require.NotContains(t, string(closing.Attrs), "carry_signals")
		next, nextHist, ok := m.Execution(old.ContinuedAs)
		require.True(t, ok, "the new run %q", old.ContinuedAs)
		require.Equal(t, wire.StatusRunning, next.Status)
		require.Equal(t, wire.EventWorkflowStarted, nextHist[0].Type)

		carried := map[int]bool{}
		for _, seq := range carry {
			carried[seq] = true
		}
		var want []string
		for _, ev := range before {
			if ev.Type == wire.EventSignalReceived && (ev.Seq > base || (carried[ev.Seq] && ev.Seq > 0 && ev.Seq <= base)) {
				want = append(want, string(ev.Attrs))
			}
		}
		var got []string
		keys := map[string]bool{}
		for _, ev := range nextHist[1:] {
			require.Equal(t, wire.EventSignalReceived, ev.Type, "only signals are carried: base %d, carry %v\n%s", base, carry, events(nextHist))
			var a struct {
				Key string `json:"idempotency_key"`
			}
			require.NoError(t, json.Unmarshal(ev.Attrs, &a))
			require.False(t, keys[a.Key], "signal %s carried twice", a.Key)
			keys[a.Key] = true
			got = append(got, string(ev.Attrs))
		}
		require.Equal(t, want, got, "base %d (the task saw %d), carry %v\nold run:\n%s", base, taskBase, carry, events(before))
	})
}

// events is a history, one event a line, for a failure's message.
func events(hist []wire.Event) string {
	var b strings.Builder
	for _, ev := range hist {
		fmt.Fprintf(&b, "  %d %s %s\n", ev.Seq, ev.Type, ev.Attrs)
	}
	return b.String()
}
