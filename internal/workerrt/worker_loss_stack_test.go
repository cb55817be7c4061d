package workerrt_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/examples/fakepay"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
	"github.com/harvest-engine/harvest/internal/wire"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// runActivity registers workflow name, which runs activity act once and
// fails with its failure's type and attempt count.
func runActivity(w *harvest.Worker, name, act string) {
	harvest.RegisterWorkflow(w, name, func(ctx *harvest.WorkflowContext, in examples.ChargeInput) (string, error) {
		var out string
		err := harvest.ExecuteActivity(ctx, act, in).Get(&out)
		var ae *harvest.ActivityError
		if errors.As(err, &ae) {
			return "", harvest.NewError(ae.Type, "after %d attempts: %s", ae.Attempts, ae.Message)
		}
		return out, err
	})
}

// activityTasksHeld is how many tasks of the activity name on the
// default queue are delivered and not acknowledged, and how many wait for
// delivery.
func activityTasksHeld(t *testing.T, s *devstack.Stack, name string) (held, waiting uint64) {
	t.Helper()
	cons, err := s.Topology.JS.Consumer(t.Context(), broker.TaskStream, workerrt.NameConsumerName(wire.DefaultTaskQueue, wire.TaskActivity, name))
	require.NoError(t, err)
	info, err := cons.Info(t.Context())
	require.NoError(t, err)
	return uint64(info.NumAckPending), info.NumPending
}

// TestAStoppingWorkerHandsBackTasksNotStarted stops a worker that runs one
// activity and holds a task it has not started (waiting for its only
// slot): the task is handed back at once and runs on another worker as
// the same attempt, long before the task ack wait; the running activity
// finishes within the shutdown grace and is reported as usual.
func TestAStoppingWorkerHandsBackTasksNotStarted(t *testing.T) {
	t.Parallel()
	const ackWait = 30 * time.Second // a task left to it fails the test
	var (
		release  = make(chan struct{})
		holding  = make(chan struct{}, 4)
		mu       sync.Mutex
		attempts []string
	)
	register := func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "stop_hold", func(ctx *harvest.ActivityContext, _ examples.ChargeInput) (string, error) {
			holding <- struct{}{}
			select {
			case <-release:
				return "finished", nil
			case <-ctx.Done():
				return "", ctx.Err()
			}
		}, harvest.ActivityOptions{StartToClose: time.Minute})
		harvest.RegisterActivity(w, "stop_quick", func(ctx *harvest.ActivityContext, _ examples.ChargeInput) (string, error) {
			mu.Lock()
			defer mu.Unlock()
			attempts = append(attempts, fmt.Sprintf("attempt %d unknown=%t", ctx.Attempt(), ctx.Info().PreviousOutcomeUnknown))
			return "quick", nil
		}, harvest.ActivityOptions{StartToClose: time.Minute})
		runActivity(w, "stop_hold", "stop_hold")
		runActivity(w, "stop_quick", "stop_quick")
	}
	s := stacktest.Start(t, devstack.Config{
		Worker:   harvest.WorkerConfig{ActivityConcurrency: 1, TaskAckWait: ackWait, ShutdownGrace: time.Minute},
		Register: register,
	})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })

	// The hold activity takes the worker's only slot (eagerly); the quick
	// one, scheduled meanwhile, is dispatched and waits on the worker for
	// that slot.
	holdID := stacktest.StartWorkflow(t, s, "stop_hold", "", `{}`).Body["execution_id"].(string)
	<-holding
	quickID := stacktest.StartWorkflow(t, s, "stop_quick", "", `{}`).Body["execution_id"].(string)
	probe.Until(t, 30*time.Second, "the worker to hold the quick activity's task", func() bool {
		held, waiting := activityTasksHeld(t, s, "stop_quick")
		return held == 1 && waiting == 0 &&
			stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'ActivityScheduled'`, quickID) == 1
	})

	other, err := harvest.NewWorker(harvest.WorkerConfig{NATS: s.NC(), TaskAckWait: ackWait})
	require.NoError(t, err)
	register(other)
	require.NoError(t, other.Start(t.Context()))
	t.Cleanup(func() { _ = other.Stop(context.Background()) })

	stopped := make(chan error, 1)
	begun := time.Now()
	go func() { stopped <- s.Worker().Stop(context.Background()) }()
	exec := stacktest.WaitCompleted(t, s, quickID)
	handedBack := time.Since(begun)
	t.Logf("the task not started ran on the other worker %s after Stop began", handedBack)
	require.Less(t, handedBack, ackWait/3, "handed back at once, not left to the ack wait")
	require.Equal(t, "quick", exec["result"])
	mu.Lock()
	require.Equal(t, []string{"attempt 1 unknown=false"}, attempts, "run once, as the attempt it was, not counted lost")
	mu.Unlock()
	select {
	case err := <-stopped:
		t.Fatalf("Stop returned while an activity was running: %v", err)
	default:
	}

	// The running activity finishes within the grace and is reported.
	once.Do(func() { close(release) })
	select {
	case err := <-stopped:
		require.NoError(t, err)
	case <-time.After(30 * time.Second):
		t.Fatal("Stop did not return once the running activity finished")
	}
	exec = stacktest.WaitCompleted(t, s, holdID)
	require.Equal(t, "finished", exec["result"])
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'ActivityCompleted' AND (attrs->>'attempt')::int = 1`, holdID))
	require.Len(t, holding, 0, "the hold activity ran once")
}

// TestAVanishedWorkersActivitiesAreReportedLost runs dispatched activities
// on a worker that then vanishes: its NATS connection closes while its
// attempts are still running (they never finish). The tasks are delivered
// again within the task ack wait to the other worker, which does not run
// the attempts again but reports them lost (WorkerLost): a charge is
// retried at once as attempt 2, which finds the charge by its key; an
// activity allowed one attempt fails, having run once.
func TestAVanishedWorkersActivitiesAreReportedLost(t *testing.T) {
	t.Parallel()
	const ackWait = 2 * time.Second
	retryWait := 200 * time.Millisecond
	provider := fakepay.New()
	var (
		release  = make(chan struct{})
		running  = make(chan string, 8)
		onceRuns atomic.Int32
	)
	provider.AfterCharge = func(fakepay.Charge) {
		running <- "charge"
		<-release // the worker vanishes before it hears back
	}
	register := func(w *harvest.Worker) {
		harvest.RegisterActivity(w, "lost_charge", func(ctx *harvest.ActivityContext, in examples.ChargeInput) (string, error) {
			c, err := provider.CreateCharge(ctx, ctx.IdempotencyKey().String(), in.AmountCents, in.CustomerID)
			return c.ID, err
		}, harvest.ActivityOptions{StartToClose: time.Minute, RetryPolicy: harvest.RetryExponential(3, retryWait)})
		harvest.RegisterReconcile(w, "lost_charge", func(ctx *harvest.ActivityContext, _ examples.ChargeInput) (string, bool, error) {
			c, found, err := provider.FindCharge(ctx, ctx.IdempotencyKey().String())
			return c.ID, found, err
		})
		harvest.RegisterActivity(w, "lost_once", func(*harvest.ActivityContext, examples.ChargeInput) (string, error) {
			onceRuns.Add(1)
			running <- "once"
			<-release
			return "ran", nil
		}, harvest.ActivityOptions{StartToClose: time.Minute, RetryPolicy: harvest.RetryExponential(1, retryWait)})
		runActivity(w, "lost_charge", "lost_charge")
		runActivity(w, "lost_once", "lost_once")
	}
	s := stacktest.Start(t, devstack.Config{Register: register})
	ctx := t.Context()
	require.NoError(t, s.Worker().Stop(ctx)) // the test's own workers run the tasks

	// The worker that vanishes has its own connection, and dispatches its
	// activities through the scheduler.
	nc, err := nats.Connect(s.NATSURL())
	require.NoError(t, err)
	t.Cleanup(nc.Close)
	doomed, err := harvest.NewWorker(harvest.WorkerConfig{NATS: nc, TaskAckWait: ackWait, DisableEagerActivities: true})
	require.NoError(t, err)
	register(doomed)
	require.NoError(t, doomed.Start(ctx))
	t.Cleanup(func() {
		close(release) // its attempts end; their results go nowhere
		_ = doomed.Stop(context.Background())
	})

	chargeID := stacktest.StartWorkflow(t, s, "lost_charge", "", `{`+stacktest.ChargeInput+`}`).Body["execution_id"].(string)
	onceID := stacktest.StartWorkflow(t, s, "lost_once", "", `{`+stacktest.ChargeInput+`}`).Body["execution_id"].(string)
	for range 2 {
		select {
		case <-running:
		case <-time.After(30 * time.Second):
			t.Fatal("the activities never started")
		}
	}

	survivor, err := harvest.NewWorker(harvest.WorkerConfig{NATS: s.NC(), TaskAckWait: ackWait})
	require.NoError(t, err)
	register(survivor)
	require.NoError(t, survivor.Start(ctx))
	t.Cleanup(func() { _ = survivor.Stop(context.Background()) })
	nc.Close() // the worker vanishes; its goroutines stay blocked
	died := time.Now()

	exec := stacktest.WaitCompleted(t, s, chargeID)
	took := time.Since(died)
	t.Logf("the vanished worker's charge completed %s after it vanished", took)
	// Redelivery within ackWait, the retry after retryWait: far below
	// the attempt's one-minute start-to-close timeout.
	require.Less(t, took, 3*ackWait+retryWait)
	require.Equal(t, 1, provider.Charges())
	require.Equal(t, 1, provider.Requests(), "attempt 2 found the charge instead of asking again")
	require.NotEmpty(t, exec["result"])
	require.Equal(t, 1, stacktest.DBCount(t, s, `SELECT count(*) FROM history_events WHERE execution_id = $1 AND type = 'ActivityCompleted' AND (attrs->>'attempt')::int = 2`, chargeID))

	failed := stacktest.WaitStatus(t, s, onceID, "Failed")["error"].(map[string]any)
	require.Equal(t, "WorkerLost", failed["type"])
	require.Contains(t, failed["message"], "after 1 attempts")
	require.EqualValues(t, 1, onceRuns.Load(), "an activity allowed one attempt ran once")
}
