// Package startpolicy owns start policies as ingest sees them: it checks a
// workflow's policy (api.StartPolicy, from the configuration or a start
// request), binds it to one start's input (the wire.StartPolicy the start
// command carries to the scheduler) and places such a start on the shard
// that keeps its policy's state. The scheduler applies the policies
// (internal/scheduler, apply_policy.go).
package startpolicy

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Bounds of a policy's parameters.
const (
	// MaxLimit bounds a throttle's limit: the scheduler keeps the start
	// times of the last limit starts of each key.
	MaxLimit = 10_000
	// MaxBatchSize bounds a batch: its execution's input holds every
	// start's input.
	MaxBatchSize = 1_000
	// MaxPeriod bounds a throttle's or debounce's period and a batch's
	// max_wait: no start waits longer than that for its window.
	MaxPeriod = 30 * 24 * time.Hour
	// MaxKeyBytes bounds the value a policy's key selects in an input.
	MaxKeyBytes = 256
)

// Error is a policy that cannot be used: Field names its member
// ("throttle.limit"), relative to the policy.
type Error struct {
	Field   string
	Message string
}

func (e *Error) Error() string { return e.Field + ": " + e.Message }

// ErrNoKey is wrapped by Policy.For when the policy's key selects nothing
// usable in the start's input.
var ErrNoKey = errors.New("the start policy's key selects no string, number or boolean in the input")

// Policy is a checked start policy.
type Policy struct {
	kind       string
	key        string
	limit      int
	period     time.Duration
	firstInput bool
	maxSize    int
	maxWait    time.Duration
}

// Parse checks p; nil p, or one that sets none of its policies, is nil.
func Parse(p *api.StartPolicy) (*Policy, error) {
	if p == nil {
		return nil, nil
	}
	n := 0
	for _, set := range []bool{p.Throttle != nil, p.Debounce != nil, p.Batch != nil, p.Concurrency != nil} {
		if set {
			n++
		}
	}
	switch {
	case n == 0:
		return nil, nil
	case n > 1:
		return nil, &Error{Field: "", Message: "give one of throttle, debounce, batch and concurrency"}
	}
	switch {
	case p.Concurrency != nil:
		c := p.Concurrency
		if c.Limit < 1 || c.Limit > MaxLimit {
			return nil, &Error{Field: "concurrency.limit", Message: fmt.Sprintf("%d: want 1 to %d", c.Limit, MaxLimit)}
		}
		if err := checkPointer("concurrency.key", c.Key); err != nil {
			return nil, err
		}
		return &Policy{kind: wire.PolicyConcurrency, key: c.Key, limit: c.Limit}, nil
	case p.Throttle != nil:
		t := p.Throttle
		if t.Limit < 1 || t.Limit > MaxLimit {
			return nil, &Error{Field: "throttle.limit", Message: fmt.Sprintf("%d: want 1 to %d", t.Limit, MaxLimit)}
		}
		period, err := duration("throttle.period", t.Period)
		if err != nil {
			return nil, err
		}
		if err := checkPointer("throttle.key", t.Key); err != nil {
			return nil, err
		}
		return &Policy{kind: wire.PolicyThrottle, key: t.Key, limit: t.Limit, period: period}, nil
	case p.Debounce != nil:
		d := p.Debounce
		period, err := duration("debounce.period", d.Period)
		if err != nil {
			return nil, err
		}
		if err := checkPointer("debounce.key", d.Key); err != nil {
			return nil, err
		}
		switch d.Input {
		case "", api.DebounceInputLast, api.DebounceInputFirst:
		default:
			return nil, &Error{Field: "debounce.input", Message: fmt.Sprintf("%q: want %s or %s", d.Input, api.DebounceInputLast, api.DebounceInputFirst)}
		}
		return &Policy{kind: wire.PolicyDebounce, key: d.Key, period: period, firstInput: d.Input == api.DebounceInputFirst}, nil
	default:
		b := p.Batch
		if b.MaxSize < 1 || b.MaxSize > MaxBatchSize {
			return nil, &Error{Field: "batch.max_size", Message: fmt.Sprintf("%d: want 1 to %d", b.MaxSize, MaxBatchSize)}
		}
		wait, err := duration("batch.max_wait", b.MaxWait)
		if err != nil {
			return nil, err
		}
		if err := checkPointer("batch.key", b.Key); err != nil {
			return nil, err
		}
		return &Policy{kind: wire.PolicyBatch, key: b.Key, maxSize: b.MaxSize, maxWait: wait}, nil
	}
}

func duration(field, s string) (time.Duration, error) {
	d, err := time.ParseDuration(s)
	switch {
	case s == "":
		return 0, &Error{Field: field, Message: `required: a duration such as "30s" or "1m"`}
	case err != nil:
		return 0, &Error{Field: field, Message: fmt.Sprintf("%q is not a duration such as \"30s\" or \"1m\"", s)}
	case d < time.Millisecond || d > MaxPeriod:
		return 0, &Error{Field: field, Message: fmt.Sprintf("%s: want 1ms to %s", d, MaxPeriod)}
	}
	return d, nil
}

func checkPointer(field, ptr string) error {
	if ptr == "" {
		return nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return &Error{Field: field, Message: fmt.Sprintf("%q is not a JSON Pointer such as \"/customer_id\"", ptr)}
	}
	for i := 0; i < len(ptr); i++ {
		if ptr[i] == '~' && (i+1 == len(ptr) || (ptr[i+1] != '0' && ptr[i+1] != '1')) {
			return &Error{Field: field, Message: fmt.Sprintf("%q has a ~ that is not ~0 or ~1", ptr)}
		}
	}
	return nil
}

// Kind is the policy's kind: wire.PolicyThrottle, PolicyDebounce,
// PolicyBatch or PolicyConcurrency.
func (p *Policy) Kind() string { return p.kind }

// KeyPointer is the JSON Pointer the policy keys its starts by, "" for
// the whole workflow.
func (p *Policy) KeyPointer() string { return p.key }

// For binds the policy to a start's input: the wire.StartPolicy its
// command carries. An input in which the key selects nothing, or
// something other than a string, number or boolean, is an error wrapping
// ErrNoKey.
func (p *Policy) For(input json.RawMessage) (*wire.StartPolicy, error) {
	sp := &wire.StartPolicy{Kind: p.kind, Limit: p.limit, FirstInput: p.firstInput, MaxSize: p.maxSize}
	switch p.kind {
	case wire.PolicyBatch:
		sp.MaxWait = p.maxWait
	default:
		sp.Period = p.period
	}
	if p.key == "" {
		return sp, nil
	}
	var doc any
	dec := json.NewDecoder(bytes.NewReader(input))
	dec.UseNumber()
	if len(input) == 0 || dec.Decode(&doc) != nil {
		return nil, fmt.Errorf("%w: key %s, and the start has no JSON input", ErrNoKey, p.key)
	}
	v, err := webhook.Pointer(doc, p.key)
	if err != nil {
		return nil, fmt.Errorf("%w: key %s selects nothing", ErrNoKey, p.key)
	}
	switch v := v.(type) {
	case string:
		sp.Key = v
	case json.Number:
		sp.Key = v.String()
	case bool:
		sp.Key = strconv.FormatBool(v)
	default:
		return nil, fmt.Errorf("%w: key %s selects %s", ErrNoKey, p.key, kindOf(v))
	}
	if len(sp.Key) > MaxKeyBytes {
		return nil, fmt.Errorf("%w: key %s selects %d bytes, more than %d", ErrNoKey, p.key, len(sp.Key), MaxKeyBytes)
	}
	return sp, nil
}

func kindOf(v any) string {
	switch v.(type) {
	case nil:
		return "null"
	case map[string]any:
		return "an object"
	case []any:
		return "an array"
	}
	return "a value of another kind"
}

// Shard is the shard a start under sp goes to: every start of a
// (workflow, kind, key) goes to one shard, which keeps the policy's
// state for it (of a writable store: see placement.Layout.PartsShard).
func Shard(layout placement.Layout, workflow string, sp *wire.StartPolicy) (int, error) {
	return layout.PartsShard(workflow, "policy", sp.Kind, sp.Key)
}

// Place makes start command cmd one under the policy, bound to its input,
// and returns the shard it goes to. A start under a policy that defers it
// has no idempotency key (the command id, deterministic for a webhook's
// or a binding's event, dedupes it); one under a concurrency policy keeps
// its key, which is claimed on that shard, as its execution is created
// there at once. Its workflow_id is minted on that shard. It returns an error wrapping ErrNoKey as For does.
func (p *Policy) Place(cmd *wire.Command, layout placement.Layout) (int, error) {
	sp, err := p.For(cmd.Start.Input)
	if err != nil {
		return 0, err
	}
	shard, err := Shard(layout, cmd.Start.WorkflowName, sp)
	if err != nil {
		return 0, err
	}
	s := cmd.Start
	s.Policy = sp
	if p.kind != wire.PolicyConcurrency {
		s.IdempotencyKey, s.Fingerprint, s.RejectFingerprintMismatch = "", "", false
	}
	s.WorkflowID, s.WorkflowIDMinted = layout.MintWorkflowID(shard, s.WorkflowName), true
	return shard, nil
}
