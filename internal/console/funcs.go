package console

import (
	"bytes"
	"encoding/json"
	"html/template"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/harvest-engine/harvest/api"
)

// funcs are the templates' helpers. Everything they return is text that
// html/template escapes where it lands.
var funcs = template.FuncMap{
	"when":        when,
	"whenp":       whenp,
	"took":        took,
	"pretty":      pretty,
	"compact":     compact,
	"short":       short,
	"lower":       strings.ToLower,
	"count":       func(m map[string]int64, status string) int64 { return m[status] },
	"terminal":    api.IsTerminal,
	"scheduleOf":  scheduleOf,
	"waitsFor":    waitsFor,
	"failureText": failureText,
}

// failureText is a failure's type and message on one line.
func failureText(raw json.RawMessage) string {
	var f struct{ Type, Message string }
	if json.Unmarshal(raw, &f) != nil {
		return compact(raw)
	}
	if f.Type != "" {
		return f.Type + ": " + f.Message
	}
	return f.Message
}

// waitsFor says what a Pending execution waits for, from its waiting_for
// and concurrency_key: "waits for a concurrency slot (key c1)"; "" when
// it waits for nothing the console can name.
func waitsFor(waitingFor string, concurrencyKey *string) string {
	if waitingFor != api.WaitingForConcurrency {
		return ""
	}
	if concurrencyKey == nil || *concurrencyKey == "" {
		return "waits for a concurrency slot (of the whole workflow)"
	}
	return "waits for a concurrency slot (key " + *concurrencyKey + ")"
}

// scheduleOf is the id of the schedule that started an execution, as its
// started_by names it ("schedule:<id>"), or "" when no schedule did.
func scheduleOf(startedBy string) string {
	id, ok := strings.CutPrefix(startedBy, "schedule:")
	if !ok {
		return ""
	}
	return id
}

// when is a time as the console shows it: UTC, to the millisecond.
func when(t time.Time) string {
	if t.IsZero() {
		return ""
	}
	return t.UTC().Format("2006-01-02 15:04:05.000")
}

func whenp(t *time.Time) string {
	if t == nil {
		return ""
	}
	return when(*t)
}

// took is the time from start to end, or "" while there is no end.
func took(start time.Time, end *time.Time) string {
	if end == nil || start.IsZero() {
		return ""
	}
	d := end.Sub(start)
	switch {
	case d < time.Millisecond:
		return d.Round(time.Microsecond).String()
	case d < time.Minute:
		return d.Round(time.Millisecond).String()
	default:
		return d.Round(time.Second).String()
	}
}

// pretty indents a JSON document; "" for none or null. Strings come out
// as they are ("<script>", not "\u003cscript\u003e"): the template
// escapes them as text.
func pretty(raw json.RawMessage) string {
	t := bytes.TrimSpace(raw)
	if len(t) == 0 || string(t) == "null" {
		return ""
	}
	return encode(t, "  ")
}

// short is s cut to 80 characters, "…" marking the cut.
func short(s string) string {
	const most = 80
	if utf8.RuneCountInString(s) <= most {
		return s
	}
	return string([]rune(s)[:most-1]) + "…"
}

// compact is a JSON document on one line, strings as they are.
func compact(raw json.RawMessage) string { return encode(raw, "") }

// encode decodes raw and encodes it again without Go's HTML escaping,
// indented by indent (none: one line); raw as it is if it is not JSON.
func encode(raw []byte, indent string) string {
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	var v any
	if err := dec.Decode(&v); err != nil {
		return string(raw)
	}
	var b bytes.Buffer
	enc := json.NewEncoder(&b)
	enc.SetEscapeHTML(false)
	enc.SetIndent("", indent)
	if err := enc.Encode(v); err != nil {
		return string(raw)
	}
	return strings.TrimSuffix(b.String(), "\n")
}
