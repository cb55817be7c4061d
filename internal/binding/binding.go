package binding

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"unicode"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/storable"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// Defaults for Binding's zero values.
const (
	// DefaultEventPointer selects the event type in the message's JSON body.
	DefaultEventPointer = "/type"
	// DefaultMaxDeliver is how many deliveries a message gets before it is
	// dead-lettered, when its command cannot be published.
	DefaultMaxDeliver = 5
	// DeadLetterPrefix starts the default dead-letter subject,
	// harvest.dead.<binding name>.
	DeadLetterPrefix = "harvest.dead."
	// ConsumerPrefix starts the name of a binding's durable consumer,
	// harvest_bind_<binding name>. Consumer names are persisted, so this
	// never changes.
	ConsumerPrefix = "harvest_bind_"
)

// Binding routes the messages of a JetStream stream, selected by a subject
// filter, to workflows.
type Binding struct {
	// Name identifies the binding: its consumer is harvest_bind_<name> and
	// its message keys are namespaced by it. Letters, digits, '_' and '-'.
	Name string `yaml:"name"`
	// Stream is the user's JetStream stream. Harvest never creates it: the
	// services that publish to it own it.
	Stream string `yaml:"stream"`
	// Subject is the consumer's filter on the stream, e.g. "orders.created"
	// or "orders.>".
	Subject string `yaml:"subject"`
	// EventPointer is a JSON Pointer selecting the event type, a string, in
	// the message's JSON body; default /type. Exclusive with EventType.
	EventPointer string `yaml:"event_pointer"`
	// EventType, when set, is the event type of every message of the
	// binding; the body is not searched for one.
	EventType string `yaml:"event_type"`
	// Rules route events by type, as for webhooks; an event no rule names
	// is acknowledged and ignored.
	Rules []webhook.Rule `yaml:"rules"`
	// MaxDeliver bounds the deliveries of a message whose command cannot
	// be published (JetStream unavailable) before it is dead-lettered;
	// default 5.
	MaxDeliver int `yaml:"max_deliver"`
	// DeadLetterSubject receives the messages that cannot become a
	// command; default harvest.dead.<name>.
	DeadLetterSubject string `yaml:"dead_letter_subject"`
	// Deliver is where a new consumer starts: "all" (default), the
	// stream's first message, or "new", messages stored from then on. An
	// existing consumer keeps its position; the server refuses to change
	// this setting on it.
	Deliver string `yaml:"deliver"`
}

// Values of Binding.Deliver.
const (
	DeliverAll = "all"
	DeliverNew = "new"
)

// WithDefaults returns b with its zero values replaced by the defaults.
func (b Binding) WithDefaults() Binding {
	if b.EventPointer == "" && b.EventType == "" {
		b.EventPointer = DefaultEventPointer
	}
	if b.MaxDeliver == 0 {
		b.MaxDeliver = DefaultMaxDeliver
	}
	if b.DeadLetterSubject == "" {
		b.DeadLetterSubject = DeadLetterPrefix + b.Name
	}
	return b
}

// ConsumerName is the name of the binding's durable consumer.
func (b Binding) ConsumerName() string { return ConsumerPrefix + b.Name }

// Rule returns the rule for an event type, if any: the first that names it.
func (b Binding) Rule(eventType string) (webhook.Rule, bool) {
	for _, r := range b.Rules {
		if r.Event == eventType {
			return r, true
		}
	}
	return webhook.Rule{}, false
}

// Validate names the first bad field.
func (b Binding) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("binding %q: "+format, append([]any{b.Name}, args...)...)
	}
	if err := dedup.ValidateName(b.Name); err != nil {
		return fmt.Errorf("binding name: %w", err)
	}
	switch {
	case b.Stream == "":
		return bad("stream is required")
	case !validStreamName(b.Stream):
		return bad("stream %q: a stream name cannot hold spaces, '.', '*', '>', '/' or '\\'", b.Stream)
	case strings.HasPrefix(b.Stream, "HARVEST_") || strings.HasPrefix(b.Stream, "KV_HARVEST_"):
		return bad("stream %q: Harvest's own streams cannot be bound", b.Stream)
	case b.Subject == "":
		return bad("subject is required")
	case !validSubject(b.Subject, true):
		return bad("subject %q: want a subject filter such as orders.created or orders.>", b.Subject)
	case b.EventPointer != "" && b.EventType != "":
		return bad("event_pointer and event_type exclude each other")
	case b.EventPointer != "" && !strings.HasPrefix(b.EventPointer, "/"):
		return bad("event_pointer %q: a JSON Pointer starts with /", b.EventPointer)
	case b.Deliver != "" && b.Deliver != DeliverAll && b.Deliver != DeliverNew:
		return bad("deliver %q: want all or new", b.Deliver)
	case b.MaxDeliver < 0:
		return bad("max_deliver %d: want a positive number", b.MaxDeliver)
	case len(b.Rules) == 0:
		return bad("rules: at least one rule is required")
	}
	if dl := b.DeadLetterSubject; dl != "" {
		switch {
		case !validSubject(dl, false):
			return bad("dead_letter_subject %q: want a subject without wildcards", dl)
		case subjectMatches(b.Subject, dl):
			return bad("dead_letter_subject %q: the binding's subject %q matches it, so dead letters would come back", dl, b.Subject)
		case strings.HasPrefix(dl, "harvest.cmd.") || strings.HasPrefix(dl, "harvest.task.") || strings.HasPrefix(dl, "$"):
			return bad("dead_letter_subject %q: reserved for Harvest and the server", dl)
		}
	} else if subjectMatches(b.Subject, DeadLetterPrefix+b.Name) {
		return bad("subject %q matches the default dead_letter_subject %q: set another", b.Subject, DeadLetterPrefix+b.Name)
	}
	for i, r := range b.Rules {
		switch {
		case r.Event == "":
			return bad("rules[%d]: event is required", i)
		case r.Workflow == "":
			return bad("rules[%d]: workflow is required", i)
		case r.Signal != "" && r.WorkflowID == "":
			return bad("rules[%d]: a signal rule needs a workflow_id template", i)
		}
	}
	return nil
}

// ValidateAll validates each binding and checks that names are unique.
func ValidateAll(bs []Binding) error {
	seen := map[string]bool{}
	for _, b := range bs {
		if err := b.Validate(); err != nil {
			return err
		}
		if seen[b.Name] {
			return fmt.Errorf("binding %q is declared twice", b.Name)
		}
		seen[b.Name] = true
	}
	return nil
}

// Workflows are the workflows the bindings' rules start: the
// configuration declares them.
func Workflows(bs []Binding) []string {
	var out []string
	for _, b := range bs {
		for _, r := range b.Rules {
			out = append(out, r.Workflow)
		}
	}
	return out
}

// validStreamName follows the server's rules for stream names.
func validStreamName(name string) bool {
	if len(name) > 255 {
		return false
	}
	for _, c := range name {
		if unicode.IsSpace(c) || !unicode.IsPrint(c) || strings.ContainsRune(".*>/\\", c) {
			return false
		}
	}
	return true
}

// validSubject checks a subject, or with wildcards allowed a subject
// filter: non-empty tokens separated by '.', no white space, '*' only as
// a whole token and '>' only as the last.
func validSubject(s string, wildcards bool) bool {
	if s == "" || len(s) > 4096 {
		return false
	}
	toks := strings.Split(s, ".")
	for i, t := range toks {
		if t == "" {
			return false
		}
		for _, c := range t {
			if unicode.IsSpace(c) || !unicode.IsPrint(c) {
				return false
			}
		}
		switch {
		case t == "*" || (t == ">" && i == len(toks)-1):
			if !wildcards {
				return false
			}
		case strings.ContainsAny(t, "*>"):
			return false
		}
	}
	return true
}

// subjectMatches says whether a literal subject matches a filter.
func subjectMatches(filter, subject string) bool {
	ft, st := strings.Split(filter, "."), strings.Split(subject, ".")
	for i, f := range ft {
		if f == ">" {
			return len(st) > i
		}
		if i >= len(st) || (f != "*" && f != st[i]) {
			return false
		}
	}
	return len(ft) == len(st)
}

// Errors of Binding.Event.
var (
	ErrInvalidJSON      = errors.New("the message is not JSON")
	ErrMissingEventType = errors.New("the message has no event type")
)

// MessageKey is the idempotency key of a bound message: its Nats-Msg-Id
// namespaced under the binding when it has one (dedup.ConnMsgIDKey), else
// its coordinates (dedup.ConnKey). A key over dedup.MaxKeyBytes is an
// error, as is an id that storable.CheckIdentifier refuses.
func MessageKey(binding, stream string, seq uint64, h nats.Header) (string, error) {
	id := h.Get(jetstream.MsgIDHeader)
	if id == "" {
		return dedup.ConnKey(binding, stream, seq), nil
	}
	key := dedup.ConnMsgIDKey(binding, id)
	if len(key) > dedup.MaxKeyBytes {
		return "", fmt.Errorf("a Nats-Msg-Id of %d bytes makes a key of %d bytes, over %d", len(id), len(key), dedup.MaxKeyBytes)
	}
	if err := storable.CheckIdentifier(id); err != nil {
		return "", fmt.Errorf("the Nats-Msg-Id %w", err)
	}
	return key, nil
}

// Event decodes a message's body, which must be one JSON value, and finds
// its event type: the binding's event_type, or the non-empty string its
// event_pointer selects. Errors wrap ErrInvalidJSON or ErrMissingEventType.
func (b Binding) Event(data []byte) (event any, eventType string, err error) {
	b = b.WithDefaults()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&event); err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalidJSON, err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, "", fmt.Errorf("%w: data after the JSON value", ErrInvalidJSON)
	}
	if b.EventType != "" {
		return event, b.EventType, nil
	}
	v, err := webhook.Pointer(event, b.EventPointer)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrMissingEventType, err)
	}
	eventType, ok := v.(string)
	if !ok || eventType == "" {
		return nil, "", fmt.Errorf("%w: %s selects no non-empty string", ErrMissingEventType, b.EventPointer)
	}
	return event, eventType, nil
}
