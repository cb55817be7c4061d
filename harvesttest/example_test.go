package harvesttest_test

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/harvesttest"
)

// exampleEnv runs the example workflows, their activities calling svc.
func exampleEnv(svc *examples.Services) *harvesttest.Env {
	env, err := harvesttest.New(func(w *harvest.Worker) { examples.Register(w, svc) }, harvesttest.Config{})
	if err != nil {
		panic(err)
	}
	return env
}

func events(x *harvesttest.Execution, typ string) int {
	history, err := x.History()
	if err != nil {
		panic(err)
	}
	n := 0
	for _, ev := range history {
		if ev.Type == typ {
			n++
		}
	}
	return n
}

// A client that retries a keyed start (its first answer was lost) gets
// the execution the first start created: one run, one charge.
func ExampleEnv_Start_charge() {
	ctx := context.Background()
	svc := examples.NewServices()
	env := exampleEnv(svc)
	defer env.Close()
	in := examples.ChargeInput{AmountCents: 1250, CustomerID: "cus_1"}

	first, _ := env.Start(ctx, examples.WorkflowCharge, in, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	again, _ := env.Start(ctx, examples.WorkflowCharge, in, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	fmt.Println("deduplicated:", again.Deduplicated, "same execution:", again.ID == first.ID)
	fmt.Println("WorkflowStarted events:", events(first, "WorkflowStarted"))
	fmt.Println("charges:", svc.Payments.Charges())
	// Output:
	// deduplicated: true same execution: true
	// WorkflowStarted events: 1
	// charges: 1
}

// The worker charges the card and dies before the attempt's result is
// recorded. Its task comes back to a new worker after the task ack wait
// (5 s), which reports the attempt lost; attempt 2 follows the retry
// policy's backoff (2 s) with the same idempotency key, and charge_card's
// reconcile function finds the charge: the card is not charged again.
func ExampleLoseActivityResult_charge() {
	ctx := context.Background()
	svc := examples.NewServices()
	env := exampleEnv(svc)
	defer env.Close()

	env.Inject(harvesttest.LoseActivityResult(examples.ActivityChargeCard))
	x, _ := env.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 1250, CustomerID: "cus_1"})
	status, _ := x.Status()
	fmt.Println("charges:", svc.Payments.Charges(), "status:", status)

	_ = env.Advance(ctx, 7*time.Second)
	status, _ = x.Status()
	fmt.Println("after 7s:", status)
	attempts := env.Attempts()
	for _, a := range attempts {
		fmt.Printf("attempt %d: result lost %t, redelivered %t, reconciled first %t, same key %t\n",
			a.Attempt, a.ResultLost, a.Redelivered, a.PreviousOutcomeUnknown, a.IdempotencyKey == attempts[0].IdempotencyKey)
	}
	fmt.Println("charges:", svc.Payments.Charges())
	// Output:
	// charges: 1 status: Running
	// after 7s: Completed
	// attempt 1: result lost true, redelivered false, reconciled first false, same key true
	// attempt 1: result lost false, redelivered true, reconciled first false, same key true
	// attempt 2: result lost false, redelivered false, reconciled first true, same key true
	// charges: 1
}

// The worker replays the new execution, decides to charge the card, and
// dies before its decision is recorded: a crash between two steps. A new
// worker gets the task after the task ack wait and decides the same. It
// cannot tell whether the dead worker ran the charge's first attempt
// eagerly, so that attempt counts as lost, and attempt 2, after the retry
// policy's backoff (2 s), reconciles first.
func ExampleLoseWorkflowTaskResult_charge() {
	ctx := context.Background()
	svc := examples.NewServices()
	env := exampleEnv(svc)
	defer env.Close()

	env.Inject(harvesttest.LoseWorkflowTaskResult(examples.WorkflowCharge))
	x, _ := env.Start(ctx, examples.WorkflowCharge, examples.ChargeInput{AmountCents: 1250, CustomerID: "cus_1"})
	fmt.Println("events:", events(x, "WorkflowStarted"), "started,", events(x, "ActivityScheduled"), "scheduled")

	_ = env.Advance(ctx, 7*time.Second)
	status, _ := x.Status()
	a := env.Attempts()[0]
	fmt.Println("status:", status, "workers:", env.Workers())
	fmt.Println("ran attempt", a.Attempt, "reconciled first:", a.PreviousOutcomeUnknown)
	fmt.Println("charges:", svc.Payments.Charges())
	fmt.Println("replays the same on a new worker:", x.Replay(nil) == nil)
	// Output:
	// events: 1 started, 0 scheduled
	// status: Completed workers: 2
	// ran attempt 2 reconciled first: true
	// charges: 1
	// replays the same on a new worker: true
}

// The same key a day later is a new order: past the start idempotency
// window (24 h) it starts a fresh run, with its own activity keys, so the
// card is charged again. After retention (7 days from its close) the first
// run is gone.
func ExampleEnv_Advance_charge() {
	ctx := context.Background()
	svc := examples.NewServices()
	env := exampleEnv(svc)
	defer env.Close()
	in := examples.ChargeInput{AmountCents: 1250, CustomerID: "cus_1"}

	first, _ := env.Start(ctx, examples.WorkflowCharge, in, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	_ = env.Advance(ctx, 23*time.Hour)
	x, _ := env.Start(ctx, examples.WorkflowCharge, in, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	fmt.Println("after 23h: deduplicated", x.Deduplicated, "charges", svc.Payments.Charges())

	_ = env.Advance(ctx, time.Hour)
	x, _ = env.Start(ctx, examples.WorkflowCharge, in, harvesttest.StartOptions{IdempotencyKey: "order-1"})
	fmt.Println("after 24h: deduplicated", x.Deduplicated, "charges", svc.Payments.Charges())

	_ = env.Advance(ctx, 6*24*time.Hour+time.Minute)
	_, err := first.Describe()
	fmt.Println("first run after 7 days:", errors.Is(err, client.ErrExecutionNotFound))
	// Output:
	// after 23h: deduplicated true charges 1
	// after 24h: deduplicated false charges 2
	// first run after 7 days: true
}

// A sender that retries a keyed signal (its first answer was lost)
// delivers it once: collect receives one item per key.
func ExampleExecution_Signal_collect() {
	ctx := context.Background()
	env := exampleEnv(examples.NewServices())
	defer env.Close()

	x, _ := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 2})
	delivered, _ := x.Signal(ctx, "item", "apples", harvesttest.SignalOptions{IdempotencyKey: "line-1"})
	fmt.Println("delivered:", delivered)
	delivered, _ = x.Signal(ctx, "item", "apples", harvesttest.SignalOptions{IdempotencyKey: "line-1"})
	fmt.Println("delivered again:", delivered, "SignalReceived events:", events(x, "SignalReceived"))

	_, _ = x.Signal(ctx, "item", "pears", harvesttest.SignalOptions{IdempotencyKey: "line-2"})
	var out examples.CollectResult
	_ = x.Result(&out)
	fmt.Printf("items: %s\n", out.Items)
	// Output:
	// delivered: true
	// delivered again: false SignalReceived events: 1
	// items: ["apples" "pears"]
}

// Workers die between two signals: one is restarted, and the next one
// dies after deciding over the second signal, before reporting it. Each
// new worker replays the history: the items are the same, each once.
func ExampleEnv_RestartWorker_collect() {
	ctx := context.Background()
	env := exampleEnv(examples.NewServices())
	defer env.Close()

	x, _ := env.Start(ctx, examples.WorkflowCollect, examples.CollectInput{Count: 3})
	_, _ = x.Signal(ctx, "item", "apples", harvesttest.SignalOptions{IdempotencyKey: "line-1"})
	_ = env.RestartWorker(ctx, nil)
	env.Inject(harvesttest.LoseWorkflowTaskResult(examples.WorkflowCollect))
	_, _ = x.Signal(ctx, "item", "pears", harvesttest.SignalOptions{IdempotencyKey: "line-2"})
	_ = env.Advance(ctx, 5*time.Second)
	_, _ = x.Signal(ctx, "item", "plums", harvesttest.SignalOptions{IdempotencyKey: "line-3"})

	var out examples.CollectResult
	_ = x.Result(&out)
	fmt.Printf("items: %s, workers: %d\n", out.Items, env.Workers())
	fmt.Println("replays the same on a new worker:", x.Replay(nil) == nil)
	// Output:
	// items: ["apples" "pears" "plums"], workers: 3
	// replays the same on a new worker: true
}
