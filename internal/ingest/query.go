package ingest

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/harvest-engine/harvest/api"
)

// Query parameters: a route reads the ones it declares, and a request
// carrying any other is refused with 400 unknown_parameter, its field the
// parameter: a misspelt filter (?workflow_name= for ?workflow=) would
// otherwise be dropped, and the answer would look like a filter that
// matched everything. Routes that read none refuse any. The health
// routes, /metrics and webhooks are not wrapped: their callers (probes,
// Prometheus, providers) may add parameters of their own.

// params wraps h so that a request with a query parameter other than
// names is answered 400 unknown_parameter before h runs.
func params(h http.HandlerFunc, names ...string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		name, ok := unknownParameter(r.URL.RawQuery, names)
		if !ok {
			h(w, r)
			return
		}
		shown := shownName(name)
		msg := fmt.Sprintf("unknown query parameter %q", shown)
		if near := nearest(name, names); near != "" {
			msg += fmt.Sprintf(" (did you mean %q?)", near)
		}
		route := r.Pattern
		if route == "" {
			route = r.Method + " " + r.URL.Path
		}
		if len(names) == 0 {
			msg += fmt.Sprintf(": %s reads no query parameters", route)
		} else {
			msg += fmt.Sprintf(": %s reads %s", route, listNames(names))
		}
		writeJSON(w, http.StatusBadRequest, api.ErrorResponse{Error: api.CodeUnknownParameter, Field: shown, Message: msg})
	}
}

// queryOf is r's query parameters, split at '&' alone, each name and
// value unescaped, or kept as sent when it does not unescape. r.URL.Query()
// drops a parameter whose value holds ';' or a bad escape, and with it
// the filter or key it carried (?status=%27;drop would list executions of
// every status, ?idempotency_key=a;b send the signal unkeyed); kept,
// the value is refused by the route's own checks, or taken as sent.
func queryOf(r *http.Request) url.Values {
	q := url.Values{}
	for pair := range strings.SplitSeq(r.URL.RawQuery, "&") {
		if pair == "" {
			continue
		}
		name, value, _ := strings.Cut(pair, "=")
		q.Add(queryUnescape(name), queryUnescape(value))
	}
	return q
}

// queryUnescape unescapes a query's name or value, or keeps it as sent
// when it does not unescape.
func queryUnescape(s string) string {
	if u, err := url.QueryUnescape(s); err == nil {
		return u
	}
	return s
}

// unknownParameter finds the first parameter of the raw query that is not
// one of names. A name that does not unescape is taken as sent.
func unknownParameter(rawQuery string, names []string) (string, bool) {
	for pair := range strings.SplitSeq(rawQuery, "&") {
		if pair == "" {
			continue
		}
		key, _, _ := strings.Cut(pair, "=")
		if k, err := url.QueryUnescape(key); err == nil {
			key = k
		}
		known := false
		for _, n := range names {
			// A name ending in ".*" takes every key it begins
			// (attr.*: the search attribute filters).
			if key == n || strings.HasSuffix(n, ".*") && strings.HasPrefix(key, strings.TrimSuffix(n, "*")) && len(key) > len(n)-1 {
				known = true
				break
			}
		}
		if !known {
			return key, true
		}
	}
	return "", false
}
