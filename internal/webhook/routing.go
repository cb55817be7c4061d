package webhook

import (
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Endpoint is a configured webhook source with its routing rules: what
// `POST /hooks/{source}` does with a verified event.
type Endpoint struct {
	Source `yaml:",inline"`
	// MaxBodyBytes caps a delivery's body; default 1 MiB.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// Rules route events by type; an event no rule names is ignored.
	Rules []Rule `yaml:"rules"`
	// Schema, when set, is a JSON Schema (written in YAML or JSON) that
	// every verified payload must match: one that does not is refused
	// with 422 and nothing is published.
	Schema any `yaml:"schema"`
}

// CompileSchema compiles the endpoint's payload schema; nil when it has
// none.
func (e Endpoint) CompileSchema() (*schema.Schema, error) {
	if e.Schema == nil {
		return nil, nil
	}
	raw, err := json.Marshal(e.Schema)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: schema: %w", e.Name, err)
	}
	sch, err := schema.Compile("hook-"+e.Name, raw)
	if err != nil {
		return nil, fmt.Errorf("webhook %s: schema: %w", e.Name, err)
	}
	return sch, nil
}

// Rule routes one event type to a start or a signal-with-start.
type Rule struct {
	// Event is the event type: the body's "type" (stripe, hmac, none) or
	// X-GitHub-Event (github).
	Event string `yaml:"event"`
	// Workflow to start, or to signal with start.
	Workflow string `yaml:"workflow"`
	// InputPointer selects the part of the event that becomes the input
	// (or the signal's payload), as a JSON Pointer; empty means the whole
	// event.
	InputPointer string `yaml:"input_pointer"`
	// Signal, when set, makes the rule a signal-with-start: the event is
	// delivered as this signal to the execution of WorkflowID.
	Signal string `yaml:"signal"`
	// WorkflowID is a template over the event: each {/json/pointer} is
	// replaced by the value it selects, e.g. "order-{/data/object/id}".
	WorkflowID string `yaml:"workflow_id"`
	// StartInput is the input of the execution a signal rule starts, when
	// none runs for WorkflowID yet.
	StartInput any `yaml:"start_input"`
}

// Validate names the first bad field.
func (e Endpoint) Validate() error {
	if err := e.Source.Validate(); err != nil {
		return err
	}
	if _, err := e.CompileSchema(); err != nil {
		return err
	}
	if e.MaxBodyBytes < 0 {
		return fmt.Errorf("webhook %s: max_body_bytes %d: want a positive size", e.Name, e.MaxBodyBytes)
	}
	for i, r := range e.Rules {
		switch {
		case r.Event == "":
			return fmt.Errorf("webhook %s: rules[%d]: event is required", e.Name, i)
		case r.Workflow == "":
			return fmt.Errorf("webhook %s: rules[%d]: workflow is required", e.Name, i)
		case r.Signal != "" && r.WorkflowID == "":
			return fmt.Errorf("webhook %s: rules[%d]: a signal rule needs a workflow_id template", e.Name, i)
		}
	}
	return nil
}

// Rule returns the rule for an event type, if any.
func (e Endpoint) Rule(eventType string) (Rule, bool) {
	for _, r := range e.Rules {
		if r.Event == eventType {
			return r, true
		}
	}
	return Rule{}, false
}

// unescapeToken decodes a reference token: ~1 is /, ~0 is ~, and any
// other ~ makes the pointer invalid (RFC 6901, section 3).
func unescapeToken(tok string) (string, bool) {
	if !strings.Contains(tok, "~") {
		return tok, true
	}
	var b strings.Builder
	for i := 0; i < len(tok); i++ {
		if tok[i] != '~' {
			b.WriteByte(tok[i])
			continue
		}
		if i+1 == len(tok) || (tok[i+1] != '0' && tok[i+1] != '1') {
			return "", false
		}
		if tok[i+1] == '0' {
			b.WriteByte('~')
		} else {
			b.WriteByte('/')
		}
		i++
	}
	return b.String(), true
}

// arrayIndex reads an array index token: "0", or digits without a
// leading zero (no sign, no "-").
func arrayIndex(tok string) (int, bool) {
	if tok == "" || (len(tok) > 1 && tok[0] == '0') {
		return 0, false
	}
	for i := 0; i < len(tok); i++ {
		if tok[i] < '0' || tok[i] > '9' {
			return 0, false
		}
	}
	i, err := strconv.Atoi(tok)
	return i, err == nil
}

// ErrPointer is returned when a JSON Pointer selects nothing.
var ErrPointer = errors.New("JSON pointer selects nothing")

// Pointer resolves an RFC 6901 JSON Pointer in a decoded JSON document.
func Pointer(doc any, ptr string) (any, error) {
	if ptr == "" {
		return doc, nil
	}
	if !strings.HasPrefix(ptr, "/") {
		return nil, fmt.Errorf("%w: %q does not start with /", ErrPointer, ptr)
	}
	cur := doc
	for _, tok := range strings.Split(ptr[1:], "/") {
		tok, ok := unescapeToken(tok)
		if !ok {
			return nil, fmt.Errorf("%w: %q has a ~ that is not ~0 or ~1", ErrPointer, ptr)
		}
		switch v := cur.(type) {
		case map[string]any:
			next, ok := v[tok]
			if !ok {
				return nil, fmt.Errorf("%w: %q", ErrPointer, ptr)
			}
			cur = next
		case []any:
			i, ok := arrayIndex(tok)
			if !ok || i >= len(v) {
				return nil, fmt.Errorf("%w: %q", ErrPointer, ptr)
			}
			cur = v[i]
		default:
			return nil, fmt.Errorf("%w: %q", ErrPointer, ptr)
		}
	}
	return cur, nil
}

// Expand fills a template's {/json/pointer} placeholders from doc; each
// must select a string or a number.
func Expand(doc any, template string) (string, error) {
	var b strings.Builder
	rest := template
	for {
		open := strings.IndexByte(rest, '{')
		if open < 0 {
			b.WriteString(rest)
			return b.String(), nil
		}
		end := strings.IndexByte(rest[open:], '}')
		if end < 0 {
			return "", fmt.Errorf("template %q: unclosed {", template)
		}
		b.WriteString(rest[:open])
		v, err := Pointer(doc, rest[open+1:open+end])
		if err != nil {
			return "", fmt.Errorf("template %q: %w", template, err)
		}
		switch v := v.(type) {
		case string:
			b.WriteString(v)
		case json.Number:
			b.WriteString(v.String())
		case float64:
			b.WriteString(strconv.FormatFloat(v, 'f', -1, 64))
		default:
			return "", fmt.Errorf("template %q: %s selects neither a string nor a number", template, rest[open+1:open+end])
		}
		rest = rest[open+end+1:]
	}
}

// ErrWorkflowID is wrapped by Command when the workflow_id a rule's
// template renders is blank or longer than dedup.MaxWorkflowIDBytes: the
// API refuses such a workflow_id from a caller, so a rule may not make one
// either.
var ErrWorkflowID = errors.New("invalid workflow_id")

// Router places the starts rules make on shards (placement.Layout).
type Router interface {
	// StartShard is the shard a new start goes to.
	StartShard(workflowName, workflowID, key string) (int, error)
	// MintWorkflowID mints a workflow_id that routes to shard.
	MintWorkflowID(shard int, workflowName string) string
}

// Command builds the command the rule makes of a decoded event, keyed by
// key (a reserved-namespace key such as dedup.HookKey's), and the shard it
// belongs on: a start of the rule's workflow, or a signal-with-start of
// the execution the rule's workflow_id template names. The start goes to
// taskQueue, the rule's workflow's configured task queue ("" for
// wire.DefaultTaskQueue). A workflow_id that is blank or over
// dedup.MaxWorkflowIDBytes is an error wrapping ErrWorkflowID; one that
// storable.CheckIdentifier refuses, an error wrapping its
// *storable.Error.
func (r Rule) Command(router Router, taskQueue, key string, event any, now time.Time) (*wire.Command, int, error) {
	taskQueue = cmp.Or(taskQueue, wire.DefaultTaskQueue)
	payload, err := Pointer(event, r.InputPointer)
	if err != nil {
		return nil, 0, err
	}
	raw, err := json.Marshal(payload)
	if err != nil {
		return nil, 0, err
	}
	if r.Signal == "" {
		shard, err := router.StartShard(r.Workflow, "", key)
		if err != nil {
			return nil, 0, err
		}
		return &wire.Command{CommandID: dedup.StartCommandID(r.Workflow, key), Kind: wire.KindStart, Start: &wire.StartCommand{
			WorkflowName: r.Workflow, WorkflowID: router.MintWorkflowID(shard, r.Workflow), WorkflowIDMinted: true,
			Input: raw, IdempotencyKey: key, Fingerprint: dedup.Fingerprint(raw), TaskQueue: taskQueue, AcceptedAt: now.UTC(),
		}}, shard, nil
	}
	workflowID, err := Expand(event, r.WorkflowID)
	if err != nil {
		return nil, 0, err
	}
	if strings.TrimSpace(workflowID) == "" || len(workflowID) > dedup.MaxWorkflowIDBytes {
		return nil, 0, fmt.Errorf("%w: template %q makes a workflow_id of %d bytes: want 1 to %d bytes, not blank",
			ErrWorkflowID, r.WorkflowID, len(workflowID), dedup.MaxWorkflowIDBytes)
	}
	if err := storable.CheckIdentifier(workflowID); err != nil {
		return nil, 0, fmt.Errorf("workflow_id %q of template %q %w", workflowID, r.WorkflowID, err)
	}
	var startInput json.RawMessage
	if r.StartInput != nil {
		if startInput, err = json.Marshal(r.StartInput); err != nil {
			return nil, 0, fmt.Errorf("start_input: %w", err)
		}
	}
	shard, err := router.StartShard(r.Workflow, workflowID, "")
	if err != nil {
		return nil, 0, err
	}
	return &wire.Command{CommandID: dedup.SignalWithStartCommandID(r.Workflow, workflowID, key), Kind: wire.KindSignalWithStart, SignalWithStart: true,
		Start:  &wire.StartCommand{WorkflowName: r.Workflow, WorkflowID: workflowID, Input: startInput, TaskQueue: taskQueue},
		Signal: &wire.SignalCommand{SignalName: r.Signal, Payload: raw, IdempotencyKey: key},
	}, shard, nil
}
