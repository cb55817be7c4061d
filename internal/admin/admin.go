package admin

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/api"
)

// ReadyTimeout bounds one readiness check: the context Config.Ready gets
// ends after it.
const ReadyTimeout = 2 * time.Second

// Config configures a Server.
type Config struct {
	// Addr is the listen address, host:port, required; port 0 picks a
	// free one (see Server.Addr).
	Addr string
	// Registry is served on GET /metrics; default an empty one.
	Registry *prometheus.Registry
	// MetricsOnly serves GET /metrics alone (a process's metrics_addr):
	// /healthz and /readyz answer 404.
	MetricsOnly bool
	// Ready says why the process is not ready, one reason each; none (nil
	// or empty) means ready. It is called for each GET /readyz, with a
	// context that ends after ReadyTimeout. Default: always ready.
	Ready  func(ctx context.Context) []string
	Logger *slog.Logger
}

// Server serves /healthz, /readyz and /metrics on Config.Addr.
type Server struct {
	cfg Config
	mux *http.ServeMux

	mu      sync.Mutex
	srv     *http.Server
	addr    string
	stopped bool
	serving conc.WaitGroup
}

// New checks cfg and returns a Server; Start serves it.
func New(cfg Config) (*Server, error) {
	if cfg.Addr == "" {
		return nil, errors.New("admin config: Addr is required")
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	if cfg.Ready == nil {
		cfg.Ready = func(context.Context) []string { return nil }
	}
	cfg.Logger = cmp.Or(cfg.Logger, slog.New(slog.DiscardHandler))
	s := &Server{cfg: cfg, mux: http.NewServeMux()}
	if !cfg.MetricsOnly {
		s.mux.HandleFunc("GET /healthz", handleHealth)
		s.mux.HandleFunc("GET /readyz", s.handleReady)
	}
	s.mux.Handle("GET /metrics", promhttp.HandlerFor(cfg.Registry, promhttp.HandlerOpts{}))
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusNotFound, api.ErrorResponse{Error: api.CodeNotFound, Message: fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path)})
	})
	return s, nil
}

// Handler serves the three routes.
func (s *Server) Handler() http.Handler { return s.mux }

// Start listens on Config.Addr and serves in the background until Stop.
// It returns once the address accepts connections, or the error that
// kept it from listening.
func (s *Server) Start(ctx context.Context) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.srv != nil {
		return errors.New("admin server already started")
	}
	var lc net.ListenConfig
	l, err := lc.Listen(ctx, "tcp", s.cfg.Addr)
	if err != nil {
		return fmt.Errorf("admin server: %w", err)
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	s.srv, s.addr = srv, l.Addr().String()
	s.serving.Go(func() {
		if err := srv.Serve(l); err != nil && !errors.Is(err, http.ErrServerClosed) {
			s.cfg.Logger.Error("admin server", "addr", l.Addr().String(), "err", err)
		}
	})
	s.cfg.Logger.Info("admin server listening", "addr", s.addr)
	return nil
}

// Addr is the address the server listens on, once started.
func (s *Server) Addr() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.addr
}

// Stop stops serving, letting requests in hand finish until ctx ends.
// Safe to call twice, and before Start.
func (s *Server) Stop(ctx context.Context) error {
	s.mu.Lock()
	srv, stopped := s.srv, s.stopped
	s.stopped = srv != nil
	s.mu.Unlock()
	if srv == nil || stopped {
		return nil
	}
	err := srv.Shutdown(ctx)
	s.serving.Wait()
	if err != nil {
		return fmt.Errorf("stop admin server: %w", err)
	}
	return nil
}

// handleHealth answers GET /healthz: 200 while the process serves.
func handleHealth(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, api.HealthResponse{Status: "ok"})
}

// handleReady answers 200 when Config.Ready finds nothing wrong, else
// 503 with its reasons.
func (s *Server) handleReady(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), ReadyTimeout)
	defer cancel()
	reasons := s.cfg.Ready(ctx)
	if len(reasons) == 0 {
		writeJSON(w, http.StatusOK, api.ReadinessResponse{Status: api.ReadyStatusReady})
		return
	}
	writeJSON(w, http.StatusServiceUnavailable, api.ReadinessResponse{
		Status: api.ReadyStatusNotReady, Error: api.CodeNotReady, Message: strings.Join(reasons, "; "), Reasons: reasons,
	})
}

func writeJSON(w http.ResponseWriter, status int, body any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(body)
}
