package examples

import (
	"encoding/json"
	"sync/atomic"
	"time"

	"github.com/harvest-engine/harvest"
)

// Names of the bench workload's workflow and activity; they travel on the
// wire.
const (
	WorkflowBenchEcho = "bench_echo"
	ActivityBenchEcho = "bench_echo_activity"
)

// BenchCounter counts the runs of bench_echo_activity in this process:
// every call of the activity function, retries and redeliveries included.
// `harvest bench` reads it to check that each workflow ran its activity
// once. Safe for concurrent use.
type BenchCounter struct {
	runs atomic.Int64
}

// Runs is the number of activity runs so far.
func (c *BenchCounter) Runs() int64 { return c.runs.Load() }

// BenchEcho runs bench_echo_activity once with its input and completes
// with the activity's result: the smallest workflow that exercises a
// start, one activity and a completion.
func BenchEcho(ctx *harvest.WorkflowContext, in json.RawMessage) (json.RawMessage, error) {
	var out json.RawMessage
	err := harvest.ExecuteActivity(ctx, ActivityBenchEcho, in).Get(&out)
	return out, err
}

// registerBench registers bench_echo and its activity on w, counting
// activity runs on c (nil counts nowhere).
func registerBench(r registrar, c *BenchCounter) {
	if c == nil {
		c = &BenchCounter{}
	}
	workflow(r, WorkflowBenchEcho, BenchEcho)
	activity(r, ActivityBenchEcho, func(_ *harvest.ActivityContext, in json.RawMessage) (json.RawMessage, error) {
		c.runs.Add(1)
		return in, nil
	}, harvest.ActivityOptions{StartToClose: 30 * time.Second})
}
