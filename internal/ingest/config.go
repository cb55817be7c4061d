package ingest

import (
	"cmp"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/harvest-engine/harvest/api"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// Defaults for Config's zero values.
const (
	DefaultOutcomeWait  = 5 * time.Second
	DefaultMaxBodyBytes = 1 << 20
	// DefaultMaxStartDelay bounds delay and start_at.
	DefaultMaxStartDelay = 30 * 24 * time.Hour
	// DefaultShardFailingAfter is how long a shard's applies keep failing
	// before /readyz reports it.
	DefaultShardFailingAfter = 10 * time.Second
	// DefaultPublishTimeout bounds a command's publish before a 503.
	DefaultPublishTimeout = 5 * time.Second
	// DefaultMaxInFlight bounds the requests served at once.
	DefaultMaxInFlight = 1024
	// DefaultWebhookMaxInFlight bounds the deliveries of one webhook
	// source (and the signed ArcFlow callbacks) read and served at once.
	DefaultWebhookMaxInFlight = 128
	// DefaultUnauthenticatedMaxInFlight bounds the other requests that
	// carry no token (budgets.go) read and served at once.
	DefaultUnauthenticatedMaxInFlight = 128
	// DefaultDBReadTimeout bounds each read of PostgreSQL an API request
	// makes before it is answered 503 with Retry-After.
	DefaultDBReadTimeout = 5 * time.Second
)

// Config configures a Server. Zero values mean the documented defaults.
type Config struct {
	Topology *broker.Topology
	// NC is the connection outcomes are received on.
	NC *nats.Conn
	// DB serves the read endpoints and command outcomes; ingest never
	// writes it. Nil makes the read endpoints answer 503, and a start
	// learns its outcome only from the scheduler's announcement.
	DB *pgxpool.Pool
	// Stores, when the deployment has several PostgreSQL stores, are
	// their pools, in the order of Topology.Layout(); DB is then the
	// first. Nil: DB is the only store.
	Stores []*pgxpool.Pool
	// OutcomeWait bounds how long a start waits for its outcome before it
	// answers 202 with a command id to poll, default 5 s.
	OutcomeWait time.Duration
	// MaxBodyBytes caps request bodies, default 1 MiB: a larger one is
	// answered 413 payload_too_large (at once when its Content-Length
	// says so) and is never read further. Webhook sources keep their
	// own limits.
	MaxBodyBytes int64
	// MaxInFlight bounds the requests served at once, default 1024; past
	// it a request is answered 503 with Retry-After at once.
	MaxInFlight int
	// WebhookMaxInFlight bounds, for each webhook source and for the
	// ArcFlow callbacks authenticated by their HMAC, the requests whose
	// bodies are being read at once and those served at once (each),
	// default 128; past it a request is answered 503 with Retry-After.
	// Those requests never take one of MaxInFlight's slots (budgets.go).
	WebhookMaxInFlight int
	// UnauthenticatedMaxInFlight bounds the same for every other request
	// that presents no valid token (the console, /openapi.json, a request
	// to an API route that is answered 401, an unknown route), default
	// 128.
	UnauthenticatedMaxInFlight int
	// DBReadTimeout bounds each read of PostgreSQL an API request makes
	// (executions, history, commands, dead commands, lists, a limited
	// token's check of an execution's workflow), default 5 s: past it the
	// request is answered 503 unavailable with Retry-After.
	DBReadTimeout time.Duration
	// PublishTimeout bounds how long a command's publish may try before
	// the request is answered 503 with Retry-After (JetStream down or
	// unreachable), default 5 s.
	PublishTimeout time.Duration
	// MaxStartDelay bounds how far ahead delay or start_at may put a
	// start, default 30 days.
	MaxStartDelay time.Duration
	// CallbackPolicy decides which completion_callback targets are
	// accepted: public addresses only, unless allow-listed.
	CallbackPolicy callback.Policy
	// IdempotencyFingerprint is "reject" to refuse a keyed retry whose
	// input differs from the original's (422 idempotency_key_reused), or
	// "ignore" (the default) to answer it with the original execution.
	IdempotencyFingerprint string
	// FingerprintByWorkflow overrides IdempotencyFingerprint per workflow.
	FingerprintByWorkflow map[string]string
	// DeclaredWorkflows are the workflows the configuration declares
	// (workflows.<name>, and the targets of NATS bindings' rules): their
	// starts are accepted while no worker serves them. A start of a
	// workflow neither declared, nor the target of a webhook rule, nor
	// registered by a live worker is answered 404 unknown_workflow.
	DeclaredWorkflows []string
	// SearchAttributes are the search attributes each workflow declares,
	// with their types (docs/search-attributes.md): a start's are checked
	// against them, and the list's and count's filters read by them.
	SearchAttributes searchattr.Schema
	// StartPolicies are the workflows' start policies
	// (workflows.<name>.start_policy): their starts are throttled,
	// debounced or batched, and take no idempotency key.
	StartPolicies map[string]*startpolicy.Policy
	// TaskQueues are the workflows' configured task queues
	// (workflows.<name>.task_queue): a start of such a workflow that names
	// no task_queue goes to its queue (every start ingest makes: the API's,
	// signal-with-start, webhook rules', ArcFlow runs), and a declared
	// workflow is accepted there while no worker serves it. A workflow
	// absent here starts on "default".
	TaskQueues map[string]string
	// Schedules are the schedules the configuration declares
	// (schedules.<id>), reconciled once Start ran: each is created or
	// replaced, and a schedule declared before and not now is deleted.
	Schedules map[string]api.ScheduleRequest
	// Webhooks are the sources POST /hooks/{source} accepts.
	Webhooks []webhook.Endpoint
	// Bindings, when set, runs the NATS subject bindings of this
	// process: GET /api/harvest/webhooks shows them with its counts.
	Bindings *binding.Runner
	// ArcFlowSecrets, when set, make POST /v1/runs/{run_id}/external/{binding_id}
	// require X-Harvest-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256
	// of the timestamp, method, path, idempotency key and body> under one
	// of them (several, for rotation), its timestamp within 5 minutes
	// (webhook.VerifyBound).
	ArcFlowSecrets []string
	// ArcFlowLegacyBodyOnly also takes an external callback signed the
	// old way, X-ArcFlow-Signature: sha256=<hex HMAC-SHA256 of the body>,
	// which binds the signature to nothing but the body: such a callback
	// can be replayed to any run, binding and key, at any time. It is for
	// senders that cannot sign X-Harvest-Signature yet, and needs
	// ArcFlowSecrets.
	ArcFlowLegacyBodyOnly bool
	// ShardFailingAfter is how long a shard's applies must have kept
	// failing before /readyz answers 503 for it, default 10 s.
	ShardFailingAfter time.Duration
	// Auth, when not nil, requires a bearer token holding each route's
	// scope on /api/harvest/... and /v1/runs... (and read on /metrics);
	// nil leaves the API open.
	Auth *auth.Authenticator
	// AllowedHosts are host names, IP addresses or CIDRs a request's Host
	// may name besides loopback ones (localhost, 127.0.0.0/8, ::1). While
	// the API needs no token (Auth nil), a request naming any other Host
	// is answered 421 host_not_allowed, so that a web page cannot reach
	// the open API through a name of its own (DNS rebinding); with tokens,
	// any Host is answered unless AllowedHosts is set. Health checks,
	// signed webhook deliveries and signed ArcFlow callbacks are answered
	// whatever their Host (browser.go).
	AllowedHosts []string
	// ConsoleTrustedProxies are the proxies (CIDRs or addresses) whose
	// X-Forwarded-Proto: https tells the console that its user came over
	// TLS, so that its session cookie is marked Secure.
	ConsoleTrustedProxies []string
	// ConsoleSessionTTL is how long a console sign-in lasts, default 12 h.
	ConsoleSessionTTL time.Duration
	// Now is the clock GET /api/harvest/retention tells "past retention"
	// by, default time.Now; a stack run with a test clock gives its
	// scheduler's.
	Now func() time.Time
	// Metrics is the registry ingest's counters go to and /metrics
	// serves; default a fresh one.
	Metrics *prometheus.Registry
	Logger  *slog.Logger
}

func (c Config) rejectsFingerprintMismatch(workflow string) bool {
	if mode, ok := c.FingerprintByWorkflow[workflow]; ok {
		return mode == FingerprintReject
	}
	return c.IdempotencyFingerprint == FingerprintReject
}

// Fingerprint modes.
const (
	FingerprintIgnore = "ignore"
	FingerprintReject = "reject"
)

func (c Config) withDefaults() Config {
	c.OutcomeWait = cmp.Or(c.OutcomeWait, DefaultOutcomeWait)
	c.MaxBodyBytes = cmp.Or(c.MaxBodyBytes, DefaultMaxBodyBytes)
	c.PublishTimeout = cmp.Or(c.PublishTimeout, DefaultPublishTimeout)
	c.MaxInFlight = cmp.Or(c.MaxInFlight, DefaultMaxInFlight)
	c.WebhookMaxInFlight = cmp.Or(c.WebhookMaxInFlight, DefaultWebhookMaxInFlight)
	c.UnauthenticatedMaxInFlight = cmp.Or(c.UnauthenticatedMaxInFlight, DefaultUnauthenticatedMaxInFlight)
	c.DBReadTimeout = cmp.Or(c.DBReadTimeout, DefaultDBReadTimeout)
	c.MaxStartDelay = cmp.Or(c.MaxStartDelay, DefaultMaxStartDelay)
	c.ShardFailingAfter = cmp.Or(c.ShardFailingAfter, DefaultShardFailingAfter)
	c.Logger = cmp.Or(c.Logger, slog.New(slog.DiscardHandler))
	c.Metrics = cmp.Or(c.Metrics, prometheus.NewRegistry())
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Topology == nil:
		return errors.New("ingest config: Topology is required")
	case c.NC == nil:
		return errors.New("ingest config: NC is required")
	case c.OutcomeWait < 0:
		return fmt.Errorf("ingest config: OutcomeWait %s: want a positive duration", c.OutcomeWait)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("ingest config: MaxBodyBytes %d: want a positive size", c.MaxBodyBytes)
	case c.MaxInFlight < 0:
		return fmt.Errorf("ingest config: MaxInFlight %d: want a positive number", c.MaxInFlight)
	case c.WebhookMaxInFlight < 0:
		return fmt.Errorf("ingest config: WebhookMaxInFlight %d: want a positive number", c.WebhookMaxInFlight)
	case c.UnauthenticatedMaxInFlight < 0:
		return fmt.Errorf("ingest config: UnauthenticatedMaxInFlight %d: want a positive number", c.UnauthenticatedMaxInFlight)
	case c.DBReadTimeout < 0:
		return fmt.Errorf("ingest config: DBReadTimeout %s: want a positive duration", c.DBReadTimeout)
	case c.ArcFlowLegacyBodyOnly && len(c.ArcFlowSecrets) == 0:
		return errors.New("ingest config: ArcFlowLegacyBodyOnly without ArcFlowSecrets: there is no signature to take the old way")
	}
	if n := c.Topology.Layout().Set.Len(); (len(c.Stores) > 0 || (c.DB != nil && n > 1)) && len(c.Stores) != n {
		return fmt.Errorf("ingest config: %d Stores for a layout of %d stores", len(c.Stores), n)
	}
	for _, h := range c.AllowedHosts {
		if _, err := parseHostRule(h); err != nil {
			return fmt.Errorf("ingest config: AllowedHosts: %w", err)
		}
	}
	if c.ConsoleSessionTTL < 0 {
		return fmt.Errorf("ingest config: ConsoleSessionTTL %s: want a positive duration", c.ConsoleSessionTTL)
	}
	for w, q := range c.TaskQueues {
		if err := dedup.ValidateName(q); err != nil {
			return fmt.Errorf("ingest config: TaskQueues[%q]: %w", w, err)
		}
	}
	seen := map[string]bool{}
	for _, e := range c.Webhooks {
		if err := e.Validate(); err != nil {
			return fmt.Errorf("ingest config: %w", err)
		}
		if seen[e.Name] {
			return fmt.Errorf("ingest config: webhook source %q is declared twice", e.Name)
		}
		seen[e.Name] = true
	}
	modes := map[string]string{"": c.IdempotencyFingerprint}
	for w, m := range c.FingerprintByWorkflow {
		modes[w] = m
	}
	for w, m := range modes {
		if m != "" && m != FingerprintIgnore && m != FingerprintReject {
			return fmt.Errorf("ingest config: idempotency_fingerprint %q (workflow %q): want ignore or reject", m, w)
		}
	}
	return nil
}
