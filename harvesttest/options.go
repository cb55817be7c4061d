package harvesttest

import (
	"cmp"
	"encoding/json"
	"fmt"
	"time"

	"github.com/harvest-engine/harvest/internal/wire"
)

// StartOptions tune a start: the fields of client.StartOptions that mean
// something to an Env, with the same meaning. The zero value is the
// defaults. Start and SignalWithStart take at most one, as their last
// argument; several are merged in order, each one's non-empty fields
// overriding the earlier ones'.
type StartOptions struct {
	// IdempotencyKey makes the start keyed: within the start idempotency
	// window every start of the workflow with the key resolves to the
	// execution the first one started.
	IdempotencyKey string
	// WorkflowID is the execution's workflow_id; empty mints one.
	// SignalWithStart takes it as an argument: leave it empty there.
	WorkflowID string
	// ReusePolicy is the start's reuse_policy (client.ReuseAllowDuplicate,
	// ...): what a start with the workflow_id of an earlier execution
	// does; empty is the deployment's default.
	ReusePolicy string
	// RunTimeout and ExecutionTimeout bound the run and its chain of
	// continued runs, on the Env's clock (zero: Config.TimeoutsByWorkflow's,
	// else none): past it the execution closes TimedOut.
	RunTimeout       time.Duration
	ExecutionTimeout time.Duration
	// Priority is the priority of the execution's tasks, 1 to 5 (zero:
	// 3). The Env runs tasks as they come; the execution shows it.
	Priority int
	// SearchAttributes are the execution's search attributes, declared
	// by Config.SearchAttributes: one its workflow does not declare, or
	// of another type, is refused as a deployment refuses it
	// (client.CodeInvalidSearchAttribute). Merged by name.
	SearchAttributes map[string]any
}

// mergeStart merges opts in order, each one's non-empty fields winning.
func mergeStart(opts []StartOptions) StartOptions {
	var o StartOptions
	for _, over := range opts {
		o.IdempotencyKey = cmp.Or(over.IdempotencyKey, o.IdempotencyKey)
		o.WorkflowID = cmp.Or(over.WorkflowID, o.WorkflowID)
		o.ReusePolicy = cmp.Or(over.ReusePolicy, o.ReusePolicy)
		o.RunTimeout = cmp.Or(over.RunTimeout, o.RunTimeout)
		o.ExecutionTimeout = cmp.Or(over.ExecutionTimeout, o.ExecutionTimeout)
		o.Priority = cmp.Or(over.Priority, o.Priority)
		for name, v := range over.SearchAttributes {
			if o.SearchAttributes == nil {
				o.SearchAttributes = map[string]any{}
			}
			o.SearchAttributes[name] = v
		}
	}
	return o
}

// apply sets s's fields that o gives. A search attribute that cannot be
// encoded is an error.
func (o StartOptions) apply(s *wire.StartCommand) error {
	s.IdempotencyKey = cmp.Or(o.IdempotencyKey, s.IdempotencyKey)
	s.WorkflowID = cmp.Or(o.WorkflowID, s.WorkflowID)
	s.ReusePolicy = cmp.Or(o.ReusePolicy, s.ReusePolicy)
	s.RunTimeoutMS = cmp.Or(o.RunTimeout.Milliseconds(), s.RunTimeoutMS)
	s.ExecutionTimeoutMS = cmp.Or(o.ExecutionTimeout.Milliseconds(), s.ExecutionTimeoutMS)
	s.Priority = cmp.Or(o.Priority, s.Priority)
	for name, v := range o.SearchAttributes {
		raw, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("search attribute %s: %w", name, err)
		}
		if s.SearchAttributes == nil {
			s.SearchAttributes = map[string]json.RawMessage{}
		}
		s.SearchAttributes[name] = raw
	}
	return nil
}

// SignalOptions tune a signal, as client.SendSignalIdempotent's key does
// a deployment's. The zero value is the defaults. Execution.Signal takes
// at most one, as its last argument; several are merged in order, each
// one's non-empty fields overriding the earlier ones'.
type SignalOptions struct {
	// IdempotencyKey makes the signal keyed: it is delivered at most once
	// per (execution, key).
	IdempotencyKey string
}

// mergeSignal merges opts in order, each one's non-empty fields winning.
func mergeSignal(opts []SignalOptions) SignalOptions {
	var o SignalOptions
	for _, over := range opts {
		o.IdempotencyKey = cmp.Or(over.IdempotencyKey, o.IdempotencyKey)
	}
	return o
}

// The functional options below are the old forms of StartOptions and
// SignalOptions, kept for one release: each returns the options struct
// with one field set, and several merge as they always combined.

// StartOption is the old name of StartOptions.
//
// Deprecated: use StartOptions.
type StartOption = StartOptions

// IdempotencyKey makes the start keyed.
//
// Deprecated: use StartOptions{IdempotencyKey: key}.
func IdempotencyKey(key string) StartOptions { return StartOptions{IdempotencyKey: key} }

// WorkflowID names the execution's workflow_id.
//
// Deprecated: use StartOptions{WorkflowID: id}.
func WorkflowID(id string) StartOptions { return StartOptions{WorkflowID: id} }

// ReusePolicy is the start's reuse_policy.
//
// Deprecated: use StartOptions{ReusePolicy: policy}.
func ReusePolicy(policy string) StartOptions { return StartOptions{ReusePolicy: policy} }

// SignalOption is the old name of SignalOptions.
//
// Deprecated: use SignalOptions.
type SignalOption = SignalOptions

// SignalKey makes the signal keyed.
//
// Deprecated: use SignalOptions{IdempotencyKey: key}.
func SignalKey(key string) SignalOptions { return SignalOptions{IdempotencyKey: key} }

// UpdateOptions are the options of Execution.Update.
type UpdateOptions struct {
	// IdempotencyKey makes the update keyed: asked again with the same
	// key (of any run of the execution's chain), it is the same update.
	IdempotencyKey string
}
