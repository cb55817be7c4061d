package console

import (
	"cmp"
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// An execution's page shows its history as a timeline: each event's
// seq, time and type, a line that says what it is about (the activity,
// signal, timer, task or child it names, its attempt, its error), and
// its attributes as indented JSON behind a <details>. Above the
// timeline, a running execution's page says what it waits for, as far
// as describe and the history tell it: the activities scheduled and not
// closed, the timers started and neither fired nor cancelled, the
// children not closed. What the history does not record (the signal a
// workflow's code blocks on, an activity's attempt in flight) it does
// not guess.

// event is one event of the timeline.
type event struct {
	Seq  int
	Type string
	At   time.Time
	// Summary is one line of what the event is about; "" when its
	// attributes say nothing more than its type.
	Summary string
	// Attrs are its attributes as indented JSON, "" for none.
	Attrs string
}

// eventOf is e as the timeline shows it.
func eventOf(e api.Event) event {
	ev := event{Seq: e.Seq, Type: e.Type, At: e.At, Summary: summaryOf(e.Attrs)}
	if len(e.Attrs) > 0 {
		if b, err := json.Marshal(e.Attrs); err == nil {
			ev.Attrs = pretty(b)
		}
	}
	return ev
}

// summaryOf says in one line what an event's attributes name, in a fixed
// order: what it is about, then how it went.
func summaryOf(attrs map[string]any) string {
	var parts []string
	add := func(format string, keys ...string) {
		vals := make([]any, len(keys))
		for i, k := range keys {
			v, ok := scalar(attrs[k])
			if !ok {
				return
			}
			vals[i] = v
		}
		parts = append(parts, fmt.Sprintf(format, vals...))
	}
	add("activity %s #%s", "activity_name", "activity_id")
	add("signal %s", "signal_name")
	add("key %s", "idempotency_key")
	add("timer #%s", "timer_id")
	add("fires at %s", "fire_at")
	add("workflow task %s", "task_id")
	add("child #%s", "child_id")
	add("workflow %s", "workflow_name")
	add("workflow ID %s", "workflow_id")
	add("change %s version %s", "change_id", "version")
	add("attempt %s", "attempt")
	if ran, ok := attemptDuration(attrs); ok {
		parts = append(parts, "ran "+ran)
	}
	add("reason: %s", "reason")
	if f, ok := attrs["failure"].(map[string]any); ok {
		if msg, ok := scalar(f["message"]); ok {
			parts = append(parts, "error: "+msg)
		}
	}
	if sa, ok := attrs["search_attributes"].(map[string]any); ok {
		names := make([]string, 0, len(sa))
		for name := range sa {
			names = append(names, name)
		}
		slices.Sort(names)
		for _, name := range names {
			b, err := json.Marshal(sa[name])
			if err == nil {
				parts = append(parts, name+" = "+compact(b))
			}
		}
	}
	return strings.Join(parts, " · ")
}

// attemptDuration is how long an activity's last attempt ran, from its
// close's started_at and ended_at (its worker's clock); false when the
// close does not say.
func attemptDuration(attrs map[string]any) (string, bool) {
	from, _ := attrs["started_at"].(string)
	to, _ := attrs["ended_at"].(string)
	start, err1 := time.Parse(time.RFC3339Nano, from)
	end, err2 := time.Parse(time.RFC3339Nano, to)
	if err1 != nil || err2 != nil || end.Before(start) {
		return "", false
	}
	d := end.Sub(start)
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String(), true
	case d < time.Second:
		return d.Round(100 * time.Microsecond).String(), true
	}
	return d.Round(time.Millisecond).String(), true
}

// scalar is a JSON scalar as text: a string as it is, a number without
// an exponent, a bool; false for anything else (absent, null, an object).
func scalar(v any) (string, bool) {
	switch v := v.(type) {
	case string:
		if t, err := time.Parse(time.RFC3339Nano, v); err == nil {
			return when(t), true
		}
		return v, v != ""
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64), true
	case bool:
		return strconv.FormatBool(v), true
	}
	return "", false
}

// attribute is one of an execution's search attributes.
type attribute struct {
	Name, Value string
	// Filter is the executions page filtered on it.
	Filter string
}

// attributesOf are describe's search attributes, by name.
func attributesOf(e api.Execution) []attribute {
	out := make([]attribute, 0, len(e.SearchAttributes))
	for name, v := range e.SearchAttributes {
		b, err := json.Marshal(v)
		if err != nil {
			continue
		}
		a := attribute{Name: name, Value: compact(b)}
		if text, ok := scalar(v); ok {
			if s, isString := v.(string); isString {
				text = s // a time as it was set, which the API reads back
			}
			q := url.Values{"workflow": {e.WorkflowName}, "attr": {name + "=" + text}}
			a.Filter = "/ui/executions?" + q.Encode()
		}
		out = append(out, a)
	}
	slices.SortFunc(out, func(a, b attribute) int { return cmp.Compare(a.Name, b.Name) })
	return out
}

// waits is what a running execution waits for, as its history and
// describe tell it.
type waits struct {
	// Code is what its workflow code's goroutines wait for, as its last
	// workflow task left them (describe's waiting_on): the signal it
	// blocks on, which no event records.
	Code       *api.Waiting
	Activities []*activity
	// NoWorker are the names of the activities no live worker registers
	// (describe's waiting_for_activity_workers).
	NoWorker map[string]bool
	Timers   []*timer
	Children []api.Child
	// Pending are describe's pending activities, by id: their attempt,
	// their retry and last failure, their heartbeat.
	Pending map[int]api.PendingActivity
}

// Any says whether the execution waits for anything.
func (w waits) Any() bool {
	return w.Code != nil && len(w.Code.Waits) > 0 || len(w.Activities)+len(w.Timers)+len(w.Children) > 0
}

// waitsOf is what d's execution waits for; none once it closed.
func (d *executionData) waitsOf() waits {
	var w waits
	if api.IsTerminal(d.E.Status) {
		return w
	}
	w.Code = d.E.WaitingOn
	for _, a := range d.Activities {
		if a.Closed == nil {
			w.Activities = append(w.Activities, a)
		}
	}
	for _, t := range d.Timers {
		if t.Fired == nil && t.Cancelled == nil {
			w.Timers = append(w.Timers, t)
		}
	}
	for _, c := range d.Children {
		if !api.IsTerminal(c.Status) {
			w.Children = append(w.Children, c)
		}
	}
	if len(d.E.PendingActivities) > 0 {
		w.Pending = map[int]api.PendingActivity{}
		for _, p := range d.E.PendingActivities {
			w.Pending[p.ActivityID] = p
		}
	}
	if len(d.E.WaitingForActivityWorkers) > 0 {
		w.NoWorker = map[string]bool{}
		for _, name := range d.E.WaitingForActivityWorkers {
			w.NoWorker[name] = true
		}
	}
	return w
}
