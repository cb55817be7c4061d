package ingest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/api"
)

// What ingest serves at once, by who asks. A request that presents a
// valid token (or any request to an API route while the API needs no
// token) takes one of max_in_flight's slots and reads its body in it:
// only a token's holder can hold one. Every other request has budgets of
// its own, so that none of it can take the slots the API needs: each
// webhook source one, the ArcFlow callbacks authenticated by their HMAC
// one (webhook_max_in_flight each), and every other request without a
// valid token one (unauthenticated_max_in_flight: the console, the API's
// description, an API request answered 401, an unknown route). Such a
// request that reads a body (a webhook, a signed callback, a console
// form) has it read first, within a deadline proportional to its size,
// in one of its budget's reading places, and only once it has arrived
// takes one of its budget's serving slots; the others are answered at
// once, unread. A body trickled in thus holds a reading place of its own
// budget for a few seconds, and nothing another budget needs. Past a budget a request is answered 503
// with Retry-After at once, not queued; /healthz and /readyz are always
// served, and /readyz names the budgets that are full.

// Reading a body before a slot: it must arrive within bodyGrace plus one
// second for each bodyRate bytes of its announced size (of its limit when
// it announces none).
const (
	bodyGrace = 2 * time.Second
	bodyRate  = 256 << 10
)

// bodyDeadline is how long a body of size bytes may take to arrive.
func bodyDeadline(size int64) time.Duration {
	return bodyGrace + time.Duration(size)*time.Second/bodyRate
}

// The budgets' names, as /readyz's saturated lists them.
const (
	budgetAPI             = "api"
	budgetArcFlow         = "arcflow"
	budgetUnauthenticated = "unauthenticated"
	budgetWebhookPrefix   = "webhook:"
)

// budget bounds the requests of one class served at once.
type budget struct {
	name string
	// what a refusal and /readyz call it, and setting the configuration
	// key that sizes it.
	what, setting string
	// serving holds a slot for each request being served.
	serving chan struct{}
	// reading, when not nil, holds a place for each request whose body is
	// being read before it is served, up to bodyLimit bytes; nil for the
	// API's, which reads bodies while served.
	reading   chan struct{}
	bodyLimit int64
}

func newBudget(name, what, setting string, limit int, readAhead bool, bodyLimit int64) *budget {
	b := &budget{name: name, what: what, setting: setting, serving: make(chan struct{}, limit), bodyLimit: bodyLimit}
	if readAhead {
		b.reading = make(chan struct{}, limit)
	}
	return b
}

// saturated says whether the budget has no slot or reading place left.
func (b *budget) saturated() bool {
	return len(b.serving) == cap(b.serving) || b.reading != nil && len(b.reading) == cap(b.reading)
}

// budgets are a server's budgets.
type budgets struct {
	api, arcflow, unauthenticated *budget
	hooks                         map[string]*budget
}

func newBudgets(cfg Config) *budgets {
	bs := &budgets{
		api:     newBudget(budgetAPI, "API requests", "max_in_flight", cfg.MaxInFlight, false, 0),
		arcflow: newBudget(budgetArcFlow, "ArcFlow callbacks", "webhook_max_in_flight", cfg.WebhookMaxInFlight, true, cfg.MaxBodyBytes),
		unauthenticated: newBudget(budgetUnauthenticated, "requests without a token", "unauthenticated_max_in_flight",
			cfg.UnauthenticatedMaxInFlight, true, cfg.MaxBodyBytes),
		hooks: map[string]*budget{},
	}
	for _, e := range cfg.Webhooks {
		limit := e.MaxBodyBytes
		if limit == 0 {
			limit = DefaultMaxBodyBytes
		}
		bs.hooks[e.Name] = newBudget(budgetWebhookPrefix+e.Name, "deliveries to webhook source "+e.Name, "webhook_max_in_flight",
			cfg.WebhookMaxInFlight, true, limit)
	}
	return bs
}

// all are the budgets, the API's first, then in a fixed order.
func (bs *budgets) all(cfg Config) []*budget {
	out := []*budget{bs.api}
	for _, e := range cfg.Webhooks {
		out = append(out, bs.hooks[e.Name])
	}
	return append(out, bs.arcflow, bs.unauthenticated)
}

// The routes that take no token, by their patterns.
const (
	hookPattern     = "POST /hooks/{source}"
	externalPattern = "POST /v1/runs/{run_id}/external/{binding_id}"
	consolePattern  = "/ui/"
)

// budgetOf is the budget r is served in, nil for the health checks,
// which are always served; readAhead says whether its body is read before
// it is served: a route without a token that reads one (a webhook, a
// signed ArcFlow callback, the console's forms). Routes answered without
// reading the body (an unknown source or route, an API request without a
// valid token) are served at once.
func (s *Server) budgetOf(r *http.Request) (b *budget, readAhead bool) {
	if r.URL.Path == "/healthz" || r.URL.Path == "/readyz" {
		return nil, false
	}
	_, pattern := s.mux.Handler(r)
	switch {
	case pattern == hookPattern:
		if b := s.budgets.hooks[strings.TrimPrefix(r.URL.Path, "/hooks/")]; b != nil {
			return b, true
		}
		// An unknown source is answered 404 at once, unread.
		return s.budgets.unauthenticated, false
	case pattern == externalPattern && len(s.cfg.ArcFlowSecrets) > 0:
		return s.budgets.arcflow, true
	case pattern == consolePattern:
		return s.budgets.unauthenticated, true
	case !apiPattern(pattern):
		return s.budgets.unauthenticated, false
	}
	if s.cfg.Auth != nil {
		// Answered 401 at once by the route's guard, unread; but not in a
		// slot of the API's.
		if _, err := s.cfg.Auth.Authenticate(r.Header.Get("Authorization")); err != nil {
			return s.budgets.unauthenticated, false
		}
	}
	return s.budgets.api, false
}

// apiPattern says whether the route pattern is one of the API's, which
// take a token when the API has tokens.
func apiPattern(pattern string) bool {
	_, path, ok := strings.Cut(pattern, " ")
	if !ok {
		path = pattern
	}
	return strings.HasPrefix(path, "/api/harvest/") || path == "/api/harvest" ||
		path == "/v1/runs" || strings.HasPrefix(path, "/v1/runs/") || path == "/metrics"
}

// limitInFlight serves each request within its budget: a request whose
// body is read ahead has it read first, in one of its budget's reading
// places; then it takes a serving slot. Past either it is answered 503
// with Retry-After at once, not queued.
func (s *Server) limitInFlight(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, readAhead := s.budgetOf(r)
		if b == nil {
			next.ServeHTTP(w, r)
			return
		}
		if readAhead && r.Body != nil && r.Body != http.NoBody && r.ContentLength != 0 {
			select {
			case b.reading <- struct{}{}:
			default:
				s.overloaded(w, r, b)
				return
			}
			read := s.readAhead(w, r, b.bodyLimit)
			<-b.reading
			if !read {
				return
			}
		}
		select {
		case b.serving <- struct{}{}:
			defer func() { <-b.serving }()
			next.ServeHTTP(w, r)
		default:
			s.overloaded(w, r, b)
		}
	})
}

// overloaded answers a request past its budget. One whose body is still
// unread closes its connection, so that the answer goes at once rather
// than after the body (net/http reads a small unread body before it
// answers, to keep the connection).
func (s *Server) overloaded(w http.ResponseWriter, r *http.Request, b *budget) {
	s.metrics.refused.WithLabelValues("overloaded").Inc()
	if r.ContentLength != 0 {
		w.Header().Set("Connection", "close")
	}
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, api.CodeUnavailable,
		fmt.Sprintf("ingest is serving %d %s already (%s); retry", cap(b.serving), b.what, b.setting))
}

// readAhead reads r's body, up to limit bytes and one more, within
// bodyDeadline of its announced size, and puts what it read back as
// r.Body for the route to read (and to refuse 413 when it is longer than
// limit). A body announced larger than limit is left unread: the route
// refuses it at once. It reports false when it has answered: 408
// body_timeout for a body that did not arrive in time, 400 for one that
// could not be read. Either closes the connection.
func (s *Server) readAhead(w http.ResponseWriter, r *http.Request, limit int64) bool {
	if r.ContentLength > limit {
		return true
	}
	size := r.ContentLength
	if size < 0 {
		size = limit
	}
	deadline := bodyDeadline(size)
	rc := http.NewResponseController(w)
	// A writer without a connection (a test's recorder) has no deadline
	// to set; its body is in memory.
	timed := rc.SetReadDeadline(time.Now().Add(deadline)) == nil
	body, err := io.ReadAll(io.LimitReader(r.Body, limit+1))
	if timed {
		_ = rc.SetReadDeadline(time.Time{})
	}
	if err != nil {
		w.Header().Set("Connection", "close")
		var ne net.Error
		if errors.Is(err, os.ErrDeadlineExceeded) || errors.As(err, &ne) && ne.Timeout() {
			s.metrics.refused.WithLabelValues(refusedSlowBody).Inc()
			s.log.Info("request refused: its body did not arrive in time", "method", r.Method, "path", r.URL.Path,
				"request_id", requestIDOf(r.Context()), "read", len(body), "deadline", deadline)
			writeError(w, http.StatusRequestTimeout, api.CodeBodyTimeout,
				fmt.Sprintf("the request body did not arrive within %s; send it at once", deadline))
			return false
		}
		writeError(w, http.StatusBadRequest, api.CodeUnreadableBody, "the request body could not be read")
		return false
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	return true
}

// refusedSlowBody is the reason of harvest_ingest_requests_refused_total
// for a body that did not arrive within its deadline.
const refusedSlowBody = "slow_body"

// saturation names the budgets that are full now: the API's, and the
// others.
func (s *Server) saturation() (api bool, others []*budget) {
	for _, b := range s.budgets.all(s.cfg) {
		if !b.saturated() {
			continue
		}
		if b == s.budgets.api {
			api = true
			continue
		}
		others = append(others, b)
	}
	return api, others
}
