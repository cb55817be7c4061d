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
	s := newSim(t, registered(func(ctx *WorkflowContext, n int) ([]string, error) {
		var got []string
		for range n {
			v, err := item.Receive(ctx)
			if err != nil {
				return nil, err
			}
			got = append(got, v)
		}
		return got, nil
	}), 3)
	// A signal that arrived before the workflow waited is buffered.
	s.signal("item", "a")
	s.signal("other", "x")
	s.signal("item", "b")
	require.Empty(t, s.task(), "waiting for the third item")
	s.signal("item", "c")
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`["a","b","c"]`)}}, s.task())
}

// approval waits up to a minute for the approve signal.
func approval(ctx *WorkflowContext, _ struct{}) (string, error) {
	v, ok, err := NewSignal[string]("approve").ReceiveWithTimeout(ctx, time.Minute)
	if err != nil {
		return "", err
	}
	if !ok {
		return "timed out", nil
	}
	return v, nil
}

func TestSelectorPicksWhatHappenedFirst(t *testing.T) {
	t.Parallel()
	first := newSim(t, registered(approval), nil)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 60000}}, first.task())

	// The signal came: the timer is cancelled.
	first.signal("approve", "yes")
	d := first.task()
	require.Equal(t, []string{wire.DecisionCancelTimer, wire.DecisionCompleteWorkflow}, kinds(d))
	require.Equal(t, json.RawMessage(`"yes"`), d[1].Result)

	// The signal came first: it wins even though the timer fired since.
	both := newSim(t, registered(approval), nil)
	both.task()
	both.signal("approve", "yes")
	both.fire(1)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionCompleteWorkflow, Result: json.RawMessage(`"yes"`)}}, both.task())

	// The timer fired first.
	second := newSim(t, registered(approval), nil)
	second.task()
	second.fire(1)
	second.signal("approve", "yes")
	require.Equal(t, json.RawMessage(`"timed out"`), second.task()[0].Result)
}

func TestSleepStartsOneDurableTimer(t *testing.T) {
	t.Parallel()
	s := newSim(t, registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		if err := Sleep(ctx, 1500*time.Millisecond); err != nil {
			return 0, err
		}
		return 1, nil
	}), nil)
	require.Equal(t, []wire.Decision{{Type: wire.DecisionStartTimer, TimerID: 1, DurationMS: 1500}}, s.task())
	require.Empty(t, s.task(), "the timer is not started twice")
	s.fire(1)
	require.Equal(t, wire.DecisionCompleteWorkflow, s.task()[0].Type)
}
