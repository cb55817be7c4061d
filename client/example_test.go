package client_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/harvest-engine/harvest/client"
)

// ChargeInput and ChargeResult are the example charge workflow's input
// and result.
type ChargeInput struct {
	AmountCents int64  `json:"amount_cents"`
	CustomerID  string `json:"customer_id"`
}

type ChargeResult struct {
	ChargeID string `json:"charge_id"`
}

// Start a workflow for a webhook event, keyed by the event's id so that
// redeliveries of the webhook converge on one execution, then wait for
// its result.
func Example() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	run, err := c.Start(ctx, "charge", ChargeInput{AmountCents: 500, CustomerID: "cus_1"},
		client.StartOptions{IdempotencyKey: "webhook-evt-abc123"})
	if err != nil {
		log.Fatal(err)
	}
	if run.Deduplicated {
		fmt.Println("a redelivery: execution", run.ExecutionID, "already exists")
	}
	var out ChargeResult
	if _, err := c.WaitResult(ctx, run.ExecutionID, &out); err != nil {
		var failed *client.ExecutionFailedError
		if errors.As(err, &failed) {
			fmt.Println("charge", failed.Status+":", failed.Message)
			return
		}
		log.Fatal(err)
	}
	fmt.Println("charged:", out.ChargeID)
}

// Deliver a signal at least once from a consumer that may redeliver: the
// key makes it land once.
func ExampleClient_SendSignalIdempotent() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	executionID := "01a236e9-0000-7000-8000-000000000000"
	delivered, err := c.SendSignalIdempotent(ctx, executionID, "item", map[string]int{"n": 1}, "evt-1")
	switch {
	case errors.Is(err, client.ErrNotFound):
		fmt.Println("no such execution")
	case errors.Is(err, client.ErrConflict):
		fmt.Println("the execution has closed")
	case err != nil:
		log.Fatal(err)
	case delivered:
		fmt.Println("signal delivered")
	default:
		fmt.Println("signal already delivered")
	}
}

// Deliver an event to the order's workflow, starting it if it is not
// running.
func ExampleClient_SignalWithStart() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	r, err := c.SignalWithStart(ctx, "collect", client.SignalWithStartOptions{
		WorkflowID:     "order-1",
		Input:          map[string]int{"count": 2},
		SignalName:     "item",
		SignalPayload:  "created",
		IdempotencyKey: "order-1-created",
	})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(r.ExecutionID, "started:", r.StartedFresh, "delivered:", r.SignalDelivered)
}

// Read an execution, its history, and the failed charges.
func ExampleClient_Describe() {
	ctx := context.Background()
	c, err := client.New(client.Config{BaseURL: "http://127.0.0.1:8080"})
	if err != nil {
		log.Fatal(err)
	}
	e, err := c.Describe(ctx, "01a236e9-0000-7000-8000-000000000000")
	if errors.Is(err, client.ErrNotFound) {
		fmt.Println("no such execution")
		return
	} else if err != nil {
		log.Fatal(err)
	}
	fmt.Println(e.WorkflowName, e.Status)
	events, err := c.History(ctx, e.ExecutionID)
	if err != nil {
		log.Fatal(err)
	}
	for _, ev := range events {
		fmt.Println(ev.Seq, ev.Type, ev.Attrs["activity_name"])
	}
	failed, err := c.List(ctx, client.ListOptions{Workflow: "charge", Status: client.StatusFailed, Limit: 10})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(len(failed), "failed charges")
}
