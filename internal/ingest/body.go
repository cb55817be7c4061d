package ingest

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/harvest-engine/harvest/api"
)

// readBody reads a request body up to MaxBodyBytes, trimmed of white
// space.
func (s *Server) readBody(w http.ResponseWriter, r *http.Request) ([]byte, *rejection) {
	body, rej := readRaw(w, r, s.cfg.MaxBodyBytes)
	return bytes.TrimSpace(body), rej
}

// readRaw reads a request body, as sent, up to limit bytes.
func readRaw(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *rejection) {
	tooLarge := func() *rejection {
		rej := reject(http.StatusRequestEntityTooLarge, api.CodePayloadTooLarge, "", fmt.Sprintf("request body exceeds %d bytes", limit))
		rej.body.Limit = limit
		return rej
	}
	if r.ContentLength > limit {
		// Refused unread; the server closes the connection rather than
		// read the rest.
		w.Header().Set("Connection", "close")
		return nil, tooLarge()
	}
	body, err := io.ReadAll(http.MaxBytesReader(unwrapWriter(w), r.Body, limit))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return nil, tooLarge()
		}
		return nil, reject(http.StatusBadRequest, api.CodeUnreadableBody, "", err.Error())
	}
	return body, nil
}

// atEnd reports whether dec, having decoded a value, has nothing but white
// space left. (dec.More is no such test: it is false before a stray ']'
// or '}'.)
func atEnd(dec *json.Decoder) bool {
	_, err := dec.Token()
	return errors.Is(err, io.EOF)
}

// readPayload reads a signal's JSON payload; an empty body is null.
func (s *Server) readPayload(w http.ResponseWriter, r *http.Request) (json.RawMessage, *rejection) {
	body, rej := s.readBody(w, r)
	if rej != nil {
		return nil, rej
	}
	if len(body) == 0 {
		return nil, nil
	}
	if !json.Valid(body) {
		return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", "the signal payload is not JSON")
	}
	return json.RawMessage(body), nil
}

// Request bodies Harvest defines (a start's, a signal-with-start's, a
// cancellation's, …) are decoded into package api's request types,
// and a member the type does not declare is refused: a misspelt member
// would otherwise be dropped without a word (a start with
// "id_reuse_policy" would run under the default policy). Names match as
// encoding/json matches them, without regard to case. User payloads
// (a start's input, a signal's payload) are never looked into.

// decodeObject decodes body, one JSON value, into v, a pointer to one of
// package api's request types. A body that is not one JSON value of v's
// shape is refused (rej, invalid_json). A body whose only fault is a
// member v does not declare is decoded all the same, and unknown is the
// refusal of its first such member: the caller decides what is checked
// before it (a keyed replay of a committed start is answered first).
func decodeObject(body []byte, v any, what string) (unknown, rej *rejection) {
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		member, found := unknownMember(body, v)
		if !found {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", fmt.Sprintf("request body is not a JSON object: %v", err))
		}
		// Decoded again, leniently, so that the members it does declare
		// are read (a start's idempotency_key among them).
		dec = json.NewDecoder(bytes.NewReader(body))
		if err := dec.Decode(v); err != nil {
			return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", fmt.Sprintf("request body is not a JSON object: %v", err))
		}
		unknown = unknownField(member, what, memberNames(reflect.TypeOf(v)))
	}
	if !atEnd(dec) {
		return nil, reject(http.StatusBadRequest, api.CodeInvalidJSON, "", "request body holds more than one JSON value")
	}
	return unknown, nil
}

// unknownMember finds, in document order, the first member of the JSON
// object that body starts with that v's type does not declare.
func unknownMember(body []byte, v any) (string, bool) {
	known := memberNames(reflect.TypeOf(v))
	dec := json.NewDecoder(bytes.NewReader(body))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", false
	}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		name, _ := tok.(string)
		if !declares(known, name) {
			return name, true
		}
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			return "", false
		}
	}
	return "", false
}

// memberNames are the JSON member names of the struct t (or *t) declares,
// in declaration order.
func memberNames(t reflect.Type) []string {
	if t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	var names []string
	for i := range t.NumField() {
		f := t.Field(i)
		if !f.IsExported() {
			continue
		}
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		switch name {
		case "-":
			continue
		case "":
			name = f.Name
		}
		names = append(names, name)
	}
	return names
}

// declares says whether name is one of known as encoding/json matches
// member names: exactly, or else with both upper-cased rune by rune.
func declares(known []string, name string) bool {
	for _, k := range known {
		// Not strings.EqualFold: its Unicode folding matches pairs that
		// upper-casing does not, and this mirrors encoding/json.
		if k == name || strings.ToUpper(k) == strings.ToUpper(name) { //nolint:staticcheck // SA6005: see above
			return true
		}
	}
	return false
}

// maxShownName bounds how much of a caller's member or parameter name an
// answer repeats.
const maxShownName = 100

// shownName is name as an answer repeats it: valid UTF-8, at most
// maxShownName bytes and an ellipsis.
func shownName(name string) string {
	name = strings.ToValidUTF8(name, "\uFFFD")
	if len(name) <= maxShownName {
		return name
	}
	cut := maxShownName
	for cut > 0 && !utf8.RuneStart(name[cut]) {
		cut--
	}
	return name[:cut] + "…"
}

// unknownField refuses the member name, which what (such as "a start's
// body") does not have, naming the ones it does.
func unknownField(name, what string, known []string) *rejection {
	shown := shownName(name)
	msg := fmt.Sprintf("unknown field %q", shown)
	if near := nearest(name, known); near != "" {
		msg += fmt.Sprintf(" (did you mean %q?)", near)
	}
	msg += fmt.Sprintf(": %s has %s", what, listNames(known))
	return reject(http.StatusBadRequest, api.CodeUnknownField, shown, msg)
}

// listNames is "a, b and c".
func listNames(names []string) string {
	switch len(names) {
	case 0:
		return "no members"
	case 1:
		return names[0]
	}
	return strings.Join(names[:len(names)-1], ", ") + " and " + names[len(names)-1]
}

// nearest is the name of known that name most likely misspells: one that
// name contains or is contained in (ignoring case, "id_reuse_policy" for
// "reuse_policy"), else one within an edit distance of 2; "" if none.
func nearest(name string, known []string) string {
	lower := strings.ToLower(name)
	if len(lower) > 2*maxShownName {
		return ""
	}
	best, bestDist := "", 3
	for _, k := range known {
		lk := strings.ToLower(k)
		if len(lower) >= 3 && (strings.Contains(lower, lk) || strings.Contains(lk, lower)) {
			return k
		}
		if d := editDistance(lower, lk); d < bestDist {
			best, bestDist = k, d
		}
	}
	return best
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
