package ingest

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"github.com/sourcegraph/conc"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/console"
	"github.com/harvest-engine/harvest/internal/historypage"
	"github.com/harvest-engine/harvest/internal/openapi"
	"github.com/harvest-engine/harvest/internal/registry"
	"github.com/harvest-engine/harvest/internal/schema"
	"github.com/harvest-engine/harvest/internal/webhook"
	"github.com/harvest-engine/harvest/internal/wire"
)

// Server serves Harvest's HTTP API.
type Server struct {
	cfg     Config
	log     *slog.Logger
	waiters *wakers[wire.Outcome]
	updates *wakers[struct{}]
	sub     *nats.Subscription
	// updateSub wakes the requests waiting on updates (updates.go).
	updateSub *nats.Subscription
	mux       *routeMux
	handler   http.Handler // mux, wrapped (guard.go)
	metrics   *metrics
	admission *mirror[api.AdmissionGate]
	schemas   *mirror[*schema.Schema]
	// workers indexes the workflows live workers serve; declared are the
	// workflows the configuration names (workers.go).
	workers  *registry.Index
	declared map[string]bool
	hooks    map[string]webhook.Endpoint
	// hookSchemas are the compiled payload schemas of the sources that
	// declare one.
	hookSchemas map[string]*schema.Schema
	// started is when the server was made: its metrics count from then.
	started time.Time
	// budgets bound the requests served at once, by who asks
	// (budgets.go).
	budgets *budgets
	// replaySubs take the replay check's requests (replaycheck.go).
	replaySubs []*nats.Subscription
	// reconcile runs the reconciliation of the configuration's schedules
	// (schedules_config.go); stopReconciling ends it.
	reconcile       conc.WaitGroup
	stopReconciling context.CancelFunc
	// pages answers workers' requests for history pages
	// (internal/historypage).
	pages *historypage.Server
	// states wakes the reads waiting for a newer query state, on the
	// announcements stateSub takes (states.go); stateRecheck is how often
	// such a read reads again unwoken.
	states       *wakers[struct{}]
	stateSub     *nats.Subscription
	stateRecheck time.Duration
}

// New checks cfg and returns a Server; Start subscribes to outcomes.
func New(cfg Config) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	sources := make([]string, 0, len(cfg.Webhooks))
	for _, e := range cfg.Webhooks {
		sources = append(sources, e.Name)
	}
	m, err := newMetrics(cfg.Metrics, sources)
	if err != nil {
		return nil, fmt.Errorf("ingest metrics: %w", err)
	}
	s := &Server{cfg: cfg, log: cfg.Logger, waiters: outcomeWakers(broker.OutcomeCommandID), updates: changeWakers(broker.UpdateID), states: changeWakers(broker.StateExecutionID), stateRecheck: defaultStateRecheck, mux: &routeMux{ServeMux: http.NewServeMux(), readTimeout: cfg.DBReadTimeout}, metrics: m,
		admission: newMirror(cfg.Topology.Admission, cfg.Logger, decodeGate),
		schemas:   newMirror(cfg.Topology.Schemas, cfg.Logger, schema.Compile),
		workers:   registry.NewIndex(cfg.Topology.Workers, cfg.Logger), declared: declaredWorkflows(cfg), started: time.Now().UTC(),
		budgets: newBudgets(cfg)}
	if err := cfg.Metrics.Register(newFailingCollector(s)); err != nil {
		return nil, fmt.Errorf("ingest metrics: %w", err)
	}
	s.hooks, s.hookSchemas = map[string]webhook.Endpoint{}, map[string]*schema.Schema{}
	for _, e := range cfg.Webhooks {
		s.hooks[e.Name] = e
		sch, err := e.CompileSchema()
		if err != nil {
			return nil, err
		}
		if sch != nil {
			s.hookSchemas[e.Name] = sch
		}
		if e.Kind == webhook.KindNone {
			s.log.Warn("webhook source accepts unsigned deliveries", "source", e.Name)
		}
	}
	// Webhooks are authenticated by their providers' signatures only.
	s.mux.HandleFunc("POST /hooks/{source}", s.handleHook)
	s.mux.HandleFunc("POST /api/harvest/admission/{workflow}/close", s.guard(auth.ScopeAdmin, params(s.handleAdmissionClose)))
	s.mux.HandleFunc("POST /api/harvest/admission/{workflow}/open", s.guard(auth.ScopeAdmin, params(s.handleAdmissionOpen)))
	s.mux.HandleFunc("GET /api/harvest/admission", s.guard(auth.ScopeRead, params(s.handleAdmissionList)))
	// The metrics hold every workflow's series: a token limited to some
	// workflows may not read them, whatever its scopes.
	s.mux.Handle("GET /metrics", s.guard(auth.ScopeMetrics, s.unlimited(promhttp.HandlerFor(cfg.Metrics, promhttp.HandlerOpts{}).ServeHTTP)))
	s.mux.HandleFunc("POST /api/harvest/workflows/{name}/start", s.guard(auth.ScopeStart, params(s.handleStart)))
	// Deprecated: the signal route under its first path, which put the
	// execution under workflows; POST /api/harvest/executions/{execution_id}/signals/{name}
	// serves the same.
	s.mux.HandleFunc("POST /api/harvest/workflows/{execution_id}/signal/{signal_name}", s.guard(auth.ScopeSignal, params(s.handleSignal("signal_name"), "idempotency_key")))
	s.mux.HandleFunc("POST /api/harvest/workflows/{name}/signal-with-start", s.guard(auth.ScopeStart, params(s.handleSignalWithStart)))
	s.mux.HandleFunc("POST /v1/runs", s.guard(auth.ScopeStart, params(s.handleCreateRun)))
	s.mux.HandleFunc("GET /v1/runs/{run_id}", s.guard(auth.ScopeRead, params(s.handleGetRun)))
	// An external callback is authenticated by its HMAC when ArcFlow
	// secrets are configured, else by a token with the signal scope.
	external := params(s.handleRunExternal)
	if len(cfg.ArcFlowSecrets) == 0 {
		external = s.guard(auth.ScopeSignal, external)
	}
	if cfg.ArcFlowLegacyBodyOnly {
		s.log.Warn("ArcFlow callbacks signed over the body alone (X-ArcFlow-Signature) are taken: " +
			"such a signature can be replayed to any run, binding and key; unset arcflow.legacy_body_only_signatures once senders sign X-Harvest-Signature")
	}
	s.mux.HandleFunc("POST /v1/runs/{run_id}/external/{binding_id}", external)
	s.mux.HandleFunc("GET /api/harvest/workflows", s.guard(auth.ScopeRead, params(s.handleListWorkflows)))
	s.mux.HandleFunc("GET /api/harvest/workflows/{name}/concurrency", s.guard(auth.ScopeRead, params(s.handleConcurrency, "key")))
	s.mux.HandleFunc("GET /api/harvest/workflows/{name}/versions", s.guard(auth.ScopeRead, params(s.handleWorkflowVersions)))
	s.mux.HandleFunc("GET /api/harvest/webhooks", s.guard(auth.ScopeRead, params(s.handleListWebhooks)))
	s.mux.HandleFunc("GET /api/harvest/workers", s.guard(auth.ScopeRead, params(s.handleListWorkers)))
	s.mux.HandleFunc("GET /api/harvest/task-queues/{name}", s.guard(auth.ScopeRead, params(s.handleTaskQueue)))
	s.mux.HandleFunc("GET /api/harvest/executions", s.guard(auth.ScopeRead, params(s.handleListExecutions,
		"workflow", "status", "key_prefix", "workflow_id_prefix", "created_after", "created_before", "limit", "cursor", "attr.*")))
	s.mux.HandleFunc("GET /api/harvest/executions/count", s.guard(auth.ScopeRead, params(s.handleCountExecutions,
		"workflow", "status", "key_prefix", "workflow_id_prefix", "created_after", "created_before", "attr.*")))
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/signals/{name}", s.guard(auth.ScopeSignal, params(s.handleSignal("name"), "idempotency_key")))
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/cancel", s.guard(auth.ScopeCancel, params(s.handleCancel)))
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/terminate", s.guard(auth.ScopeCancel, params(s.handleTerminate)))
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/reset", s.guard(auth.ScopeCancel, params(s.handleReset, "dry_run")))
	s.mux.HandleFunc("POST /api/harvest/batches", s.guard(auth.ScopeCancel, params(s.handleCreateBatch)))
	s.mux.HandleFunc("GET /api/harvest/batches", s.guard(auth.ScopeRead, params(s.handleListBatches, "limit")))
	s.mux.HandleFunc("GET /api/harvest/batches/{batch_id}", s.guard(auth.ScopeRead, params(s.handleGetBatch)))
	s.mux.HandleFunc("POST /api/harvest/batches/{batch_id}/cancel", s.guard(auth.ScopeCancel, params(s.handleCancelBatch)))
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}", s.guard(auth.ScopeRead, params(s.handleGetExecution)))
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/history", s.guard(auth.ScopeRead, params(s.handleGetHistory)))
	s.mux.HandleFunc("POST /api/harvest/executions/{execution_id}/updates/{name}", s.guard(auth.ScopeSignal, params(s.handleUpdate, "wait")))
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/updates/{update_id}", s.guard(auth.ScopeRead, params(s.handleGetUpdate, "wait")))
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/state", s.guard(auth.ScopeRead, params(s.handleListStates)))
	s.mux.HandleFunc("GET /api/harvest/executions/{execution_id}/children", s.guard(auth.ScopeRead, params(s.handleListChildren)))
	s.mux.HandleFunc(stateRoute, s.guard(auth.ScopeRead, params(s.handleGetState, "after_seq", "wait")))
	s.mux.HandleFunc("GET /api/harvest/schedules", s.guard(auth.ScopeRead, params(s.handleListSchedules, "limit", "cursor")))
	s.mux.HandleFunc("PUT /api/harvest/schedules/{schedule_id}", s.guard(auth.ScopeStart, params(s.handlePutSchedule)))
	s.mux.HandleFunc("GET /api/harvest/schedules/{schedule_id}", s.guard(auth.ScopeRead, params(s.handleGetSchedule)))
	s.mux.HandleFunc("DELETE /api/harvest/schedules/{schedule_id}", s.guard(auth.ScopeStart, params(s.handleDeleteSchedule)))
	s.mux.HandleFunc("GET /api/harvest/schedules/{schedule_id}/fires", s.guard(auth.ScopeRead, params(s.handleScheduleFires, "limit", "cursor")))
	s.mux.HandleFunc("POST /api/harvest/schedules/{schedule_id}/pause", s.guard(auth.ScopeStart, params(s.handlePauseSchedule)))
	s.mux.HandleFunc("POST /api/harvest/schedules/{schedule_id}/unpause", s.guard(auth.ScopeStart, params(s.handleUnpauseSchedule)))
	s.mux.HandleFunc("POST /api/harvest/schedules/{schedule_id}/trigger", s.guard(auth.ScopeStart, params(s.handleTriggerSchedule)))
	s.mux.HandleFunc("POST /api/harvest/schedules/{schedule_id}/backfill", s.guard(auth.ScopeStart, params(s.handleBackfillSchedule)))
	s.mux.HandleFunc("GET /api/harvest/commands/{command_id}", s.guard(auth.ScopeRead, params(s.handleGetCommand)))
	s.mux.HandleFunc("GET /api/harvest/commands/dead", s.guard(auth.ScopeRead, params(s.handleListDead, "shard", "before", "limit")))
	s.mux.HandleFunc("GET /api/harvest/commands/dead/{id}", s.guard(auth.ScopeRead, params(s.handleGetDead)))
	s.mux.HandleFunc("GET /api/harvest/retention", s.guard(auth.ScopeRead, params(s.handleRetention, "as_of")))
	s.mux.HandleFunc("POST /api/harvest/retention/prune", s.guard(auth.ScopeAdmin, params(s.handlePrune)))
	// The web console: one more client of the routes above, called in
	// the process with its user's token.
	ui, err := console.New(console.Config{API: s.recoverPanics(s.mux), Auth: cfg.Auth, SessionTTL: cfg.ConsoleSessionTTL,
		TrustedProxies: cfg.ConsoleTrustedProxies, Logger: cfg.Logger})
	if err != nil {
		return nil, err
	}
	s.mux.Handle("/ui/", ui)
	s.mux.HandleFunc("GET /openapi.json", handleOpenAPI)
	s.mux.HandleFunc("GET /healthz", handleHealth)
	s.mux.HandleFunc("GET /readyz", s.handleReady)
	s.mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, api.CodeNotFound, fmt.Sprintf("no route for %s %s", r.Method, r.URL.Path))
	})
	s.handler = withRequestID(s.instrument(s.browserGuard(s.limitInFlight(s.recoverPanics(s.mux)))))
	return s, nil
}

// Start subscribes to command outcomes, query state announcements and
// admission gates.
func (s *Server) Start(ctx context.Context) error {
	if err := s.admission.start(ctx); err != nil {
		return err
	}
	if err := s.schemas.start(ctx); err != nil {
		s.admission.close()
		return err
	}
	if err := s.workers.Start(ctx); err != nil {
		s.admission.close()
		s.schemas.close()
		return err
	}
	sub, err := s.cfg.NC.Subscribe(broker.OutcomeSubjects, s.waiters.deliver)
	if err != nil {
		return fmt.Errorf("subscribe to outcomes: %w", err)
	}
	if err := sub.SetPendingLimits(-1, -1); err != nil {
		return fmt.Errorf("subscribe to outcomes: %w", err)
	}
	s.sub = sub
	if s.updateSub, err = s.cfg.NC.Subscribe(broker.UpdateSubjects, s.updates.deliver); err != nil {
		_ = sub.Unsubscribe()
		return fmt.Errorf("subscribe to updates: %w", err)
	}
	stateSub, err := s.cfg.NC.Subscribe(broker.StateSubjects, s.states.deliver)
	if err == nil {
		err = stateSub.SetPendingLimits(-1, -1)
	}
	if err != nil {
		_ = sub.Unsubscribe()
		_ = s.updateSub.Unsubscribe()
		return fmt.Errorf("subscribe to query state announcements: %w", err)
	}
	s.stateSub = stateSub
	if err := s.startReplayCheck(); err != nil {
		_ = sub.Unsubscribe()
		_ = s.updateSub.Unsubscribe()
		_ = stateSub.Unsubscribe()
		return err
	}
	s.startReconcile()
	if s.hasDB() {
		pools := map[int]*pgxpool.Pool{}
		for i, p := range s.pools() {
			pools[i] = p
		}
		if s.pages, err = historypage.Serve(s.cfg.NC, pools, s.log); err != nil {
			s.stopReplayCheck()
			_ = sub.Unsubscribe()
			_ = s.updateSub.Unsubscribe()
			_ = stateSub.Unsubscribe()
			return err
		}
	}
	return nil
}

// Stop ends the outcome and query state subscriptions. Safe to call
// twice.
func (s *Server) Stop(_ context.Context) error {
	if s.sub != nil {
		_ = s.sub.Unsubscribe()
	}
	if s.updateSub != nil {
		_ = s.updateSub.Unsubscribe()
	}
	if s.stateSub != nil {
		_ = s.stateSub.Unsubscribe()
	}
	s.stopReconcile()
	s.stopReplayCheck()
	s.pages.Stop()
	s.pages = nil
	s.admission.close()
	s.schemas.close()
	s.workers.Close()
	return nil
}

// routeMux is the server's ServeMux, keeping the patterns it was given.
// The API's reads are served under readTimeout (deadline.go).
type routeMux struct {
	*http.ServeMux
	patterns    []string
	readTimeout time.Duration
}

func (m *routeMux) Handle(pattern string, h http.Handler) {
	m.patterns = append(m.patterns, pattern)
	if m.readTimeout > 0 && readRoute(pattern) {
		h = withReadDeadline(m.readTimeout, h)
	}
	m.ServeMux.Handle(pattern, h)
}

func (m *routeMux) HandleFunc(pattern string, h func(http.ResponseWriter, *http.Request)) {
	m.Handle(pattern, http.HandlerFunc(h))
}

// Routes are the patterns the server serves ("POST /v1/runs"), in the
// order they were registered; internal/openapi's tests hold them to the
// API's description.
func (s *Server) Routes() []string { return slices.Clone(s.mux.patterns) }

// handleOpenAPI is GET /openapi.json: the API's OpenAPI 3.1 description,
// needing no token (it holds no data).
func handleOpenAPI(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "public, max-age=300")
	_, _ = w.Write(openapi.JSON)
}

// Handler is the API's http.Handler.
func (s *Server) Handler() http.Handler { return s.handler }
