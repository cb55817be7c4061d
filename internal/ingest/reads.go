package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/store"
)

// The read routes answer from PostgreSQL, through internal/store.

// readable checks that reads can be served, and answers 503 when not.
func (s *Server) readable(w http.ResponseWriter) bool {
	if !s.hasDB() {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "this ingest has no database to read from")
		return false
	}
	return true
}

// readError answers a failed read: 404 for an unknown execution, else
// 503 with Retry-After.
func (s *Server) readError(w http.ResponseWriter, id string, err error) {
	if errors.Is(err, store.ErrExecutionNotFound) {
		writeError(w, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %q", id))
		return
	}
	s.log.Warn("read failed", "execution_id", id, "err", err)
	w.Header().Set("Retry-After", "1")
	if errors.Is(err, context.DeadlineExceeded) {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable,
			fmt.Sprintf("the database did not answer within %s (db_read_timeout); retry", s.cfg.DBReadTimeout))
		return
	}
	writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "the database could not be read; retry")
}

// queryLimit reads a list's ?limit=, 1 to 500, def when absent; it
// answers 400 invalid_limit and reports false for anything else.
func queryLimit(w http.ResponseWriter, q url.Values, def int) (int, bool) {
	v := q.Get("limit")
	if v == "" {
		return def, true
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 500 {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidLimit, "limit", "limit must be 1 to 500")
		return 0, false
	}
	return n, true
}
