package harvest

import (
	"strconv"
	"testing"

	"github.com/harvest-engine/harvest/internal/wire"
)

// replayHistory is the history of a workflow that has run steps
// activities, one after another, each completed: as the scheduler writes
// it, one workflow task per step.
func replayHistory(b *testing.B, steps int) []wire.Event {
	b.Helper()
	s := newSim(b, stepsWorkflow(steps), 0)
	for i := 1; i <= steps; i++ {
		s.task()
		s.complete(i, i)
	}
	return s.hist
}

// steps runs n activities in a row, each fed the last one's result.
func stepsWorkflow(n int) workflowFunc {
	return registered(func(ctx *WorkflowContext, in int) (int, error) {
		for range n {
			if err := ExecuteActivity(ctx, "step", in).Get(&in); err != nil {
				return 0, err
			}
		}
		return in, nil
	})
}

// BenchmarkReplay measures a workflow task: replaying the whole history
// and deciding the next step. One step is the W1 bench workflow's second
// task; twenty shows how replay cost grows with history.
func BenchmarkReplay(b *testing.B) {
	for _, n := range []int{1, 20} {
		b.Run("steps="+strconv.Itoa(n), func(b *testing.B) {
			fn := stepsWorkflow(n)
			task := &wire.WorkflowTask{History: replayHistory(b, n)}
			b.ReportAllocs()
			for b.Loop() {
				d, err := runWorkflowTask(fn, task, nil)
				if err != nil || len(d) != 1 || d[0].Type != wire.DecisionCompleteWorkflow {
					b.Fatalf("decisions %v, err %v", d, err)
				}
			}
		})
	}
}
