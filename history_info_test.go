package harvest

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// ContinueAsNewSuggested is each task's, as the scheduler dispatched it;
// a replay reads it from the tasks' WorkflowTaskCompleted events, so the
// code sees what it saw when it first ran, at each point.
func TestContinueAsNewSuggestedIsTheTasksAndTheSameOnReplay(t *testing.T) {
	t.Parallel()
	var seen []bool
	fn := registered(func(ctx *WorkflowContext, _ struct{}) (int, error) {
		n := 0
		for !GetInfo(ctx).ContinueAsNewSuggested {
			seen = append(seen, false)
			if err := Sleep(ctx, time.Second); err != nil {
				return 0, err
			}
			n++
		}
		seen = append(seen, true)
		return n, nil
	})
	s := newSim(t, fn, nil)
	s.task()
	s.fire(1)
	s.task()
	s.fire(2)
	s.suggest = true
	d := s.task()
	require.Equal(t, []string{"complete_workflow"}, kinds(d))
	require.JSONEq(t, `2`, string(s.result()))

	seen = nil
	s.suggest = false // what a later task would say changes nothing before it
	_, err := s.replay(fn)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, true}, seen)
}
