package ingest

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/store"
)

// The API's routes are registered with the scope they need. With no
// authenticator (no tokens configured) every route is open; with one, a
// request without a known bearer token is answered 401, one whose token
// lacks the scope 403, before anything is read or published.

type principalKey struct{}

// principalOf is the caller of r's context; nil when the API is open.
func principalOf(ctx context.Context) *auth.Principal {
	p, _ := ctx.Value(principalKey{}).(*auth.Principal)
	return p
}

// callerName names the caller of ctx for logs and the executions it
// starts: the token's name, "" when the API is open.
func callerName(ctx context.Context) string {
	if p := principalOf(ctx); p != nil {
		return p.Name()
	}
	return ""
}

// guard wraps h so that it runs only for a caller holding scope.
func (s *Server) guard(scope auth.Scope, h http.HandlerFunc) http.HandlerFunc {
	if s.cfg.Auth == nil {
		return h
	}
	return func(w http.ResponseWriter, r *http.Request) {
		p, err := s.cfg.Auth.Authenticate(r.Header.Get("Authorization"))
		if err != nil {
			challenge := `Bearer realm="harvest"`
			if errors.Is(err, auth.ErrUnknownToken) || errors.Is(err, auth.ErrMalformed) {
				challenge += `, error="invalid_token"`
			}
			w.Header().Set("WWW-Authenticate", challenge)
			s.metrics.refused.WithLabelValues("unauthenticated").Inc()
			s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "reason", err.Error())
			writeError(w, http.StatusUnauthorized, api.CodeUnauthenticated, err.Error())
			return
		}
		if !p.Has(scope) {
			s.metrics.refused.WithLabelValues("forbidden").Inc()
			s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "token", p.Name(), "lacks", string(scope))
			writeError(w, http.StatusForbidden, api.CodeForbidden, fmt.Sprintf("token %q lacks scope %s", p.Name(), scope))
			return
		}
		h(w, r.WithContext(context.WithValue(r.Context(), principalKey{}, p)))
	}
}

// mayUse answers 403 and reports false when the caller's token is limited
// to other workflows than workflow: a request that names the workflow it
// acts on (a start, an admission gate) is refused, not hidden.
func (s *Server) mayUse(w http.ResponseWriter, r *http.Request, workflow string) bool {
	p := principalOf(r.Context())
	if p == nil || p.Sees(workflow) {
		return true
	}
	s.metrics.refused.WithLabelValues("forbidden").Inc()
	s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "token", p.Name(), "workflow", workflow)
	writeError(w, http.StatusForbidden, api.CodeForbidden,
		fmt.Sprintf("token %q is limited to the workflows %s", p.Name(), strings.Join(p.Workflows(), ", ")))
	return false
}

// pathWorkflow reads the workflow name a route's path names in param: it
// answers 400 invalid_workflow_name for a name that is not one, and 403
// when the caller may not act on the workflow (mayUse), reporting false.
func (s *Server) pathWorkflow(w http.ResponseWriter, r *http.Request, param string) (string, bool) {
	name := r.PathValue(param)
	if err := dedup.ValidateName(name); err != nil {
		writeFieldError(w, http.StatusBadRequest, api.CodeInvalidWorkflowName, param, err.Error())
		return "", false
	}
	return name, s.mayUse(w, r, name)
}

// unlimited wraps h so that it answers 403 to a token limited to some
// workflows: h serves what every workflow shares (the metrics).
func (s *Server) unlimited(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		p := principalOf(r.Context())
		if p == nil || p.Workflows() == nil {
			h(w, r)
			return
		}
		s.metrics.refused.WithLabelValues("forbidden").Inc()
		s.log.Info("request refused", "method", r.Method, "path", r.URL.Path, "token", p.Name(), "reason", "limited to workflows")
		writeError(w, http.StatusForbidden, api.CodeForbidden,
			fmt.Sprintf("token %q is limited to the workflows %s, and %s holds every workflow's series", p.Name(), strings.Join(p.Workflows(), ", "), r.URL.Path))
	}
}

// sees says whether the caller may see an execution of workflow. An
// execution it may not see is answered 404, as if it did not exist.
func sees(ctx context.Context, workflow string) bool {
	p := principalOf(ctx)
	return p == nil || p.Sees(workflow)
}

// limitedTo is the workflows the caller's token is limited to, nil when
// it is not.
func limitedTo(ctx context.Context) []string {
	if p := principalOf(ctx); p != nil {
		return p.Workflows()
	}
	return nil
}

// limited says whether the caller's token is limited to some workflows.
func limited(ctx context.Context) bool {
	p := principalOf(ctx)
	return p != nil && p.Workflows() != nil
}

// executionVisible reports whether the execution id (a UUID) is one the
// caller may act on; when not, it has answered 404 (or 503 when PostgreSQL
// cannot say). Only a token limited to some workflows costs a read.
func (s *Server) executionVisible(w http.ResponseWriter, r *http.Request, id string) bool {
	if !limited(r.Context()) {
		return true
	}
	if !s.hasDB() {
		writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable, "this ingest has no database to check the execution's workflow against the token's")
		return false
	}
	ctx, cancel := s.readContext(r.Context())
	defer cancel()
	e, err := store.GetExecution(ctx, s.poolOf(id), id)
	if err != nil {
		s.readError(w, id, err)
		return false
	}
	if !sees(r.Context(), e.WorkflowName) {
		writeError(w, http.StatusNotFound, api.CodeExecutionNotFound, fmt.Sprintf("no execution %q", id))
		return false
	}
	return true
}
