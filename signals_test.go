package harvest

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/wire"
)

func TestSignalsAreReceivedInArrivalOrder(t *testing.T) {
	t.Parallel()
	item := NewSignal[string]("item")
	fn := registered(func(ctx *WorkflowContext, n int) ([]string, error) {
		var got []string
		for range n {
			v, err := item.Receive(ctx)
			if err != nil {
				return nil, err
			}
			got = append(got, v)
		}
		return got, nil
	})
	history := []wire.Event{
		ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{Input: json.RawMessage(`3`)}),
		// A signal that arrived before the workflow waited is buffered.
		ev(t, 2, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: "item", Payload: json.RawMessage(`"a"`)}),
		ev(t, 3, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: "other", Payload: json.RawMessage(`"x"`)}),
		ev(t, 4, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: "item", Payload: json.RawMessage(`"b"`)}),
	}
	d, err := runWorkflowTask(fn, &wire.WorkflowTask{History: history}, nil)
	require.NoError(t, err)
	require.Empty(t, d, "waiting for the third item")
	history = append(history, ev(t, 5, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: "item", Payload: json.RawMessage(`"c"`)}))
	d, err = runWorkflowTask(fn, &wire.WorkflowTask{History: history}, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`["a","b","c"]`)}}, d)
}

func TestSelectorPicksWhatHappenedFirst(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (string, error) {
		v, ok, err := NewSignal[string]("approve").ReceiveWithTimeout(ctx, time.Minute)
		if err != nil {
			return "", err
		}
		if !ok {
			return "timed out", nil
		}
		return v, nil
	})
	started := ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})
	d, err := runWorkflowTask(fn, &wire.WorkflowTask{History: []wire.Event{started}}, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 60000}}, d)

	timerStarted := ev(t, 2, wire.EventTimerStarted, wire.TimerAttrs{TimerID: 1})
	signal := func(seq int) wire.Event {
		return ev(t, seq, wire.EventSignalReceived, wire.SignalReceivedAttrs{SignalName: "approve", Payload: json.RawMessage(`"yes"`)})
	}
	fired := func(seq int) wire.Event { return ev(t, seq, wire.EventTimerFired, wire.TimerAttrs{TimerID: 1}) }

	// The signal came first: it wins even though the timer fired since.
	d, err = runWorkflowTask(fn, &wire.WorkflowTask{History: []wire.Event{started, timerStarted, signal(3), fired(4)}}, nil)
	require.NoError(t, err)
	require.Equal(t, json.RawMessage(`"yes"`), d[0].Result)
	// The timer fired first.
	d, err = runWorkflowTask(fn, &wire.WorkflowTask{History: []wire.Event{started, timerStarted, fired(3), signal(4)}}, nil)
	require.NoError(t, err)
	require.Equal(t, json.RawMessage(`"timed out"`), d[0].Result)
}

func TestSleepStartsOneDurableTimer(t *testing.T) {
	t.Parallel()
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		Sleep(ctx, 1500*time.Millisecond)
		return 1, nil
	})
	h := []wire.Event{ev(t, 1, wire.EventWorkflowStarted, wire.WorkflowStartedAttrs{})}
	d, err := runWorkflowTask(fn, &wire.WorkflowTask{History: h}, nil)
	require.NoError(t, err)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 1500}}, d)
	h = append(h, ev(t, 2, wire.EventTimerStarted, wire.TimerAttrs{TimerID: 1}))
	d, err = runWorkflowTask(fn, &wire.WorkflowTask{History: h}, nil)
	require.NoError(t, err)
	require.Empty(t, d, "the timer is not started twice")
	h = append(h, ev(t, 3, wire.EventTimerFired, wire.TimerAttrs{TimerID: 1}))
	d, err = runWorkflowTask(fn, &wire.WorkflowTask{History: h}, nil)
	require.NoError(t, err)
	require.Equal(t, wire.DecisionCompleteWorkflow, d[0].Type)
}
