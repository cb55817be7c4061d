// Package searchattr holds search attributes' rules (docs/search-attributes.md):
// the types a workflow declares its attributes with, which values fit
// them, how a value is stored to be indexed, and the conditions a list,
// a count or a batch filters on. Ingest, the scheduler and the
// configuration all check by it.
//
// It is pure computation: no I/O.
package searchattr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harvest-engine/harvest/internal/wire"
)

// Types are the types an attribute is declared with.
var Types = []string{wire.SearchKeyword, wire.SearchInt, wire.SearchDouble, wire.SearchBool, wire.SearchTime}

// MaxKeywordBytes bounds a keyword value.
const MaxKeywordBytes = 1024

// MaxPerExecution bounds the attributes a workflow declares.
const MaxPerExecution = 64

// Schema is the declared attributes: by workflow, each attribute's type
// by its name.
type Schema map[string]map[string]string

// ValidName checks an attribute's name: 1 to 64 letters, digits and '_',
// starting with a letter.
func ValidName(name string) error {
	if name == "" || len(name) > 64 {
		return fmt.Errorf("%q: want 1 to 64 letters, digits and '_', starting with a letter", name)
	}
	for i, r := range name {
		letter := r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z'
		if !letter && (i == 0 || !(r == '_' || r >= '0' && r <= '9')) {
			return fmt.Errorf("%q: want 1 to 64 letters, digits and '_', starting with a letter", name)
		}
	}
	return nil
}

// Column is the column of the search_attributes table a value of type
// typ is indexed in: keyword (a keyword, a bool), num (an int, a
// double) or ts (a time); "" for no type.
func Column(typ string) string {
	switch typ {
	case wire.SearchKeyword, wire.SearchBool:
		return "keyword"
	case wire.SearchInt, wire.SearchDouble:
		return "num"
	case wire.SearchTime:
		return "ts"
	}
	return ""
}

// Holds says whether v, as indexed, has a value in the column of typ.
func Holds(v Stored, typ string) bool {
	switch Column(typ) {
	case "keyword":
		return v.Keyword != nil
	case "num":
		return v.Num != nil
	case "ts":
		return v.Time != nil
	}
	return false
}

// ValidType says whether typ is one of Types.
func ValidType(typ string) bool { return slices.Contains(Types, typ) }

// Error says which attribute a check refused, and why.
type Error struct {
	Name, Reason string
}

func (e *Error) Error() string { return fmt.Sprintf("search attribute %s: %s", e.Name, e.Reason) }

// ErrInvalid matches every *Error.
var ErrInvalid = errors.New("invalid search attribute")

// Is makes errors.Is(err, ErrInvalid) hold.
func (e *Error) Is(target error) bool { return target == ErrInvalid }

// Check checks attrs, set on an execution of workflow: each declared by
// the workflow, each value of its type. It names the first attribute at
// fault, in name order.
func (s Schema) Check(workflow string, attrs map[string]json.RawMessage) error {
	return s.check(workflow, attrs, false)
}

// CheckUpsert is Check for what workflow code upserts, where a JSON null
// removes a declared attribute (Removed).
func (s Schema) CheckUpsert(workflow string, attrs map[string]json.RawMessage) error {
	return s.check(workflow, attrs, true)
}

// Removed says whether raw, an upserted value, removes its attribute: a
// JSON null.
func Removed(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

func (s Schema) check(workflow string, attrs map[string]json.RawMessage, removable bool) error {
	declared := s[workflow]
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		typ, ok := declared[name]
		if !ok {
			reason := fmt.Sprintf("workflow %s does not declare it (workflows.%s.search_attributes)", workflow, workflow)
			if len(declared) > 0 {
				reason += "; it declares " + strings.Join(slices.Sorted(maps.Keys(declared)), ", ")
			}
			return &Error{Name: name, Reason: reason}
		}
		if removable && Removed(attrs[name]) {
			continue
		}
		if _, err := Store(typ, attrs[name]); err != nil {
			return &Error{Name: name, Reason: err.Error()}
		}
	}
	return nil
}

// Stored is a value as it is indexed (wire.SearchValue).
type Stored = wire.SearchValue

// Store checks raw, a JSON value, against typ and returns it as indexed.
func Store(typ string, raw json.RawMessage) (Stored, error) {
	raw = bytes.TrimSpace(raw)
	if Removed(raw) {
		// JSON's null decodes into a string, a bool or a number as their
		// zero value, without an error: refused here, not stored as one.
		return Stored{}, fmt.Errorf("want a value of type %s, not null (only workflow code removes an attribute, upserting it as nil)", typ)
	}
	switch typ {
	case wire.SearchKeyword:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return Stored{}, fmt.Errorf("want a string (keyword), not %s", shown(raw))
		}
		if len(s) > MaxKeywordBytes || !utf8.ValidString(s) || strings.ContainsRune(s, 0) {
			return Stored{}, fmt.Errorf("want text of at most %d bytes, without NUL", MaxKeywordBytes)
		}
		return Stored{Keyword: &s}, nil
	case wire.SearchBool:
		var b bool
		if json.Unmarshal(raw, &b) != nil {
			return Stored{}, fmt.Errorf("want true or false (bool), not %s", shown(raw))
		}
		s := strconv.FormatBool(b)
		return Stored{Keyword: &s}, nil
	case wire.SearchInt:
		var n json.Number
		d := json.NewDecoder(bytes.NewReader(raw))
		d.UseNumber()
		if d.Decode(&n) != nil {
			return Stored{}, fmt.Errorf("want an integer (int), not %s", shown(raw))
		}
		i, err := n.Int64()
		if err != nil || math.Abs(float64(i)) > 1<<53 {
			return Stored{}, fmt.Errorf("want an integer of at most 2^53 in magnitude (int), not %s", shown(raw))
		}
		f := float64(i)
		return Stored{Num: &f}, nil
	case wire.SearchDouble:
		var f float64
		if json.Unmarshal(raw, &f) != nil || math.IsInf(f, 0) || math.IsNaN(f) {
			return Stored{}, fmt.Errorf("want a number (double), not %s", shown(raw))
		}
		return Stored{Num: &f}, nil
	case wire.SearchTime:
		var s string
		if json.Unmarshal(raw, &s) != nil {
			return Stored{}, fmt.Errorf("want an RFC 3339 time string (time), not %s", shown(raw))
		}
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return Stored{}, fmt.Errorf("want an RFC 3339 time such as 2026-12-07T10:00:00Z (time), not %q", s)
		}
		t = t.UTC()
		return Stored{Time: &t}, nil
	}
	return Stored{}, fmt.Errorf("type %q is none of %s", typ, strings.Join(Types, ", "))
}

// shown is a JSON value as an error message shows it, shortened.
func shown(raw json.RawMessage) string {
	s := string(raw)
	if len(s) > 40 {
		s = s[:40] + "…"
	}
	if s == "" {
		return "nothing"
	}
	return s
}

// Ops of a condition.
const (
	OpEq  = "eq"
	OpGt  = "gt"
	OpGte = "gte"
	OpLt  = "lt"
	OpLte = "lte"
)

// Condition is one filter on an attribute (wire.SearchCondition).
type Condition = wire.SearchCondition

// Resolve gives the type of attribute name: as workflow declares it when
// workflow is set, else as every workflow that declares it does.
func (s Schema) Resolve(workflow, name string) (string, error) {
	if workflow != "" {
		typ, ok := s[workflow][name]
		if !ok {
			return "", &Error{Name: name, Reason: fmt.Sprintf("workflow %s does not declare it", workflow)}
		}
		return typ, nil
	}
	found := ""
	for _, wf := range slices.Sorted(maps.Keys(s)) {
		typ, ok := s[wf][name]
		switch {
		case !ok:
		case found == "":
			found = typ
		case found != typ:
			return "", &Error{Name: name, Reason: "workflows declare it with different types: name the workflow to filter on it"}
		}
	}
	if found == "" {
		return "", &Error{Name: name, Reason: "no workflow declares it"}
	}
	return found, nil
}

// ParseCondition reads one filter of a list or count query: key is
// "attr.NAME" (equality) or "attr.NAME.OP" (gt, gte, lt, lte: ints,
// doubles and times), value the value as text. workflow, when set, is
// the workflow filtered on, whose declarations give the type.
func (s Schema) ParseCondition(workflow, key, value string) (Condition, error) {
	rest, ok := strings.CutPrefix(key, "attr.")
	if !ok {
		return Condition{}, fmt.Errorf("%q is no search attribute filter: want attr.NAME or attr.NAME.OP", key)
	}
	name, op, hasOp := strings.Cut(rest, ".")
	if !hasOp {
		op = OpEq
	}
	if err := ValidName(name); err != nil {
		return Condition{}, &Error{Name: name, Reason: err.Error()}
	}
	typ, err := s.Resolve(workflow, name)
	if err != nil {
		return Condition{}, err
	}
	switch op {
	case OpEq:
	case OpGt, OpGte, OpLt, OpLte:
		if typ != wire.SearchInt && typ != wire.SearchDouble && typ != wire.SearchTime {
			return Condition{}, &Error{Name: name, Reason: fmt.Sprintf("a %s attribute takes equality only, not %s", typ, op)}
		}
	default:
		return Condition{}, &Error{Name: name, Reason: fmt.Sprintf("%q is no operator: want gt, gte, lt or lte", op)}
	}
	raw := json.RawMessage(value)
	if typ == wire.SearchKeyword || typ == wire.SearchTime {
		raw, _ = json.Marshal(value)
	}
	v, err := Store(typ, raw)
	if err != nil {
		return Condition{}, &Error{Name: name, Reason: err.Error()}
	}
	return Condition{Name: name, Op: op, Value: v}, nil
}

// Fold applies to attrs (nil: a new map) the search attributes history
// events set: a start's and each upsert's, in order. An upsert's null
// stays, as null: the attribute was removed (Removed), which a run
// that also copies another's attributes must write over them.
func Fold(attrs map[string]json.RawMessage, events []wire.Event) map[string]json.RawMessage {
	if attrs == nil {
		attrs = map[string]json.RawMessage{}
	}
	for _, ev := range events {
		var set map[string]json.RawMessage
		switch ev.Type {
		case wire.EventWorkflowStarted:
			var a wire.WorkflowStartedAttrs
			if json.Unmarshal(ev.Attrs, &a) == nil {
				set = a.SearchAttributes
			}
		case wire.EventSearchAttributesUpserted:
			var a wire.SearchAttributesAttrs
			if json.Unmarshal(ev.Attrs, &a) == nil {
				set = a.SearchAttributes
			}
		}
		maps.Copy(attrs, set)
	}
	return attrs
}
