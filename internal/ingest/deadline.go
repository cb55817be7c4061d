package ingest

import (
	"context"
	"net/http"
	"strings"
	"time"
)

// Every read the API makes of PostgreSQL has a deadline, DBReadTimeout
// (db_read_timeout, default 5 s): a database that does not answer (frozen,
// unreachable, its pool exhausted) makes a read answer 503 unavailable
// with Retry-After within it, rather than hold the request, and its slot
// of max_in_flight, for as long as the database takes. The API's reads
// (its GET routes, which read nothing else for long) run under it whole,
// from the route table; the reads a command makes of PostgreSQL take it
// where they are made (a limited token's check of an execution's
// workflow, a webhook's late outcome), or have bounds of their own (a
// keyed start's claim, the wait for an outcome).

// readRoute says whether a route pattern is one of the API's reads, run
// under the read deadline. A query state's read waits for a newer value
// (states.go), an update's read for its answer (updates.go): each of
// their reads takes the deadline instead.
func readRoute(pattern string) bool {
	if longPollRoute(pattern) {
		return false
	}
	return strings.HasPrefix(pattern, "GET /api/harvest/") || strings.HasPrefix(pattern, "GET /v1/runs/")
}

// longPollRoute says whether a read route can wait (its ?wait=) for what
// it reads to change: it bounds each of its reads by the read deadline
// itself (readContext), not the request whole.
func longPollRoute(pattern string) bool {
	return pattern == stateRoute || strings.HasPrefix(pattern, "GET /api/harvest/executions/{execution_id}/updates/")
}

// withReadDeadline runs h with a context that ends after d.
func withReadDeadline(d time.Duration, h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), d)
		defer cancel()
		h.ServeHTTP(w, r.WithContext(ctx))
	})
}

// readContext bounds a read of PostgreSQL that a command makes by
// DBReadTimeout.
func (s *Server) readContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, s.cfg.DBReadTimeout)
}
