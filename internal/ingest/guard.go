package ingest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/http"
	"runtime/debug"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// What wraps every route: a request id on each answer, bounds on the
// requests served at once (budgets.go), and a last answer for a handler
// that panics.
// The HTTP server's own timeouts and header limit are in HTTPServer.

// Server limits, for HTTPServer.
const (
	// readHeaderTimeout bounds the request line and headers.
	readHeaderTimeout = 10 * time.Second
	// readTimeout bounds the whole request, body included: a body
	// trickled in is cut.
	readTimeout = 60 * time.Second
	// idleTimeout closes a kept-alive connection that sends nothing.
	idleTimeout = 120 * time.Second
	// maxHeaderBytes bounds the request line and headers.
	maxHeaderBytes = 64 << 10
	// writeMargin is what an answer may take past the longest a handler
	// waits (publish, then outcome).
	writeMargin = 30 * time.Second
)

// HTTPServer is the HTTP server of the API on addr, with the limits that
// keep a slow or hostile client from holding it: a read-header, read,
// write and idle timeout, and a header size limit.
func (s *Server) HTTPServer(addr string) *http.Server {
	return &http.Server{
		Addr:              addr,
		Handler:           s.Handler(),
		ReadHeaderTimeout: readHeaderTimeout,
		ReadTimeout:       readTimeout,
		WriteTimeout:      s.cfg.PublishTimeout + s.cfg.OutcomeWait + writeMargin,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
	}
}

type requestIDKey struct{}

// requestIDOf is the id of the request of ctx.
func requestIDOf(ctx context.Context) string {
	id, _ := ctx.Value(requestIDKey{}).(string)
	return id
}

// validRequestID says whether a caller's X-Request-Id may be echoed: 1 to
// 128 characters of letters, digits and -_.:/
func validRequestID(id string) bool {
	if id == "" || len(id) > 128 {
		return false
	}
	for _, c := range []byte(id) {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z', c >= '0' && c <= '9':
		case c == '-', c == '_', c == '.', c == ':', c == '/':
		default:
			return false
		}
	}
	return true
}

// newRequestID is 16 random bytes in hex.
func newRequestID() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b) // crypto/rand.Read does not fail (Go 1.24+)
	return hex.EncodeToString(b)
}

// withRequestID gives every request an id, the caller's X-Request-Id when
// it sent a usable one, and puts it on the answer.
func withRequestID(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if !validRequestID(id) {
			id = newRequestID()
		}
		w.Header().Set("X-Request-Id", id)
		next.ServeHTTP(w, r.WithContext(context.WithValue(r.Context(), requestIDKey{}, id)))
	})
}

// recoverPanics answers 500 internal, with the request id, for a handler
// that panicked, and logs the panic; nothing of it reaches the caller.
func (s *Server) recoverPanics(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		defer func() {
			v := recover()
			if v == nil || v == http.ErrAbortHandler {
				if v != nil {
					panic(v)
				}
				return
			}
			s.internalError(w, r, fmt.Errorf("panic: %v\n%s", v, debug.Stack()))
		}()
		next.ServeHTTP(w, r)
	})
}

// internalError logs err with the request's id and answers 500 internal
// with the id alone: internal detail (PostgreSQL's, NATS's, the
// resolver's) stays in the log.
func (s *Server) internalError(w http.ResponseWriter, r *http.Request, err error) {
	id := requestIDOf(r.Context())
	s.log.Error("internal error", "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	writeJSON(w, http.StatusInternalServerError, api.ErrorResponse{Error: api.CodeInternal,
		Message: "internal error; the server's log has the detail under this request id", RequestID: id})
}

// unavailable logs err with the request's id and answers 503 with
// Retry-After and message, which must not quote err.
func (s *Server) unavailable(w http.ResponseWriter, r *http.Request, message string, err error) {
	id := requestIDOf(r.Context())
	s.log.Warn(message, "request_id", id, "method", r.Method, "path", r.URL.Path, "err", err)
	w.Header().Set("Retry-After", "1")
	writeJSON(w, http.StatusServiceUnavailable, api.ErrorResponse{Error: api.CodeUnavailable, Message: message, RequestID: id})
}
