package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// Duration is a time.Duration written as "5s", "24h" in YAML.
type Duration time.Duration

// UnmarshalYAML parses a Go duration string.
func (d *Duration) UnmarshalYAML(n *yaml.Node) error {
	v, err := time.ParseDuration(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*d = Duration(v)
	return nil
}

// Config is the configuration every Harvest service reads; each uses the
// fields it needs.
type Config struct {
	// NATSURL is the NATS server, or several comma-separated, given to the
	// client as its server pool (HARVEST_NATS_URL):
	// nats://a:4222,nats://b:4222,nats://c:4222.
	NATSURL string `yaml:"nats_url"`
	// NATSReplicas is the replica count of every stream and bucket Harvest
	// declares (HARVEST_NATS_REPLICAS), 1 to 5, default 1. A changed value
	// is applied to the existing streams and buckets in place.
	NATSReplicas int `yaml:"nats_replicas"`
	// NATSCommandStreamMaxBytes bounds the command stream, HARVEST_CMD
	// (HARVEST_NATS_COMMAND_STREAM_MAX_BYTES), default 1 GiB, at least
	// 4 MiB. It fills only while the schedulers apply no commands; full,
	// it refuses new ones (ingest answers 503). NATS reserves it on each
	// server that holds a replica. A changed value is applied in place.
	NATSCommandStreamMaxBytes int64 `yaml:"nats_command_stream_max_bytes"`
	// NATSTaskStreamMaxBytes bounds the task stream, HARVEST_TASK
	// (HARVEST_NATS_TASK_STREAM_MAX_BYTES), default 1 GiB, at least 4 MiB.
	// It fills only while workers take no tasks; full, the schedulers keep
	// new tasks in their outbox until it drains.
	NATSTaskStreamMaxBytes int64 `yaml:"nats_task_stream_max_bytes"`
	// NATSCredentialsFile is a .creds file, a user JWT and its nkey seed
	// (HARVEST_NATS_CREDENTIALS_FILE).
	NATSCredentialsFile string `yaml:"nats_credentials_file"`
	// NATSNkeyFile is a file holding an nkey seed (HARVEST_NATS_NKEY_FILE).
	NATSNkeyFile string `yaml:"nats_nkey_file"`
	// NATSUser and NATSPassword authenticate with a user and password
	// (HARVEST_NATS_USER, HARVEST_NATS_PASSWORD); NATSPasswordFile reads
	// the password from a file instead (HARVEST_NATS_PASSWORD_FILE).
	NATSUser         string `yaml:"nats_user"`
	NATSPassword     string `yaml:"nats_password"`
	NATSPasswordFile string `yaml:"nats_password_file"`
	// NATSToken authenticates with a token (HARVEST_NATS_TOKEN);
	// NATSTokenFile reads it from a file instead (HARVEST_NATS_TOKEN_FILE).
	NATSToken     string `yaml:"nats_token"`
	NATSTokenFile string `yaml:"nats_token_file"`
	// NATSTLSCAFile verifies the NATS servers' certificates against this CA
	// (HARVEST_NATS_TLS_CA_FILE); NATSTLSCertFile and NATSTLSKeyFile are
	// the client certificate and key, for servers that verify clients
	// (HARVEST_NATS_TLS_CERT_FILE, HARVEST_NATS_TLS_KEY_FILE).
	NATSTLSCAFile   string `yaml:"nats_tls_ca_file"`
	NATSTLSCertFile string `yaml:"nats_tls_cert_file"`
	NATSTLSKeyFile  string `yaml:"nats_tls_key_file"`
	// DatabaseURL is the PostgreSQL server (HARVEST_DATABASE_URL). Its
	// parameters pass through to the driver unchanged, TLS among them:
	// postgres://harvest@db:5432/harvest?sslmode=verify-full&sslrootcert=/etc/harvest/pg-ca.pem.
	DatabaseURL string `yaml:"database_url"`
	// DatabaseURLFile reads the database URL, which may hold a password,
	// from a file instead (HARVEST_DATABASE_URL_FILE).
	DatabaseURLFile string `yaml:"database_url_file"`
	// Stores, when set, spread the executions over several PostgreSQL
	// stores (docs/deploy.md#several-postgresql-stores), each with its
	// own database_url (or database_url_file) and mode; database_url is
	// then left unset. The first store is the one a deployment with one
	// database_url becomes; stores are added at the end, never
	// reordered or removed (a drained store stays, read_only).
	Stores []StoreConfig `yaml:"stores"`
	// DatabaseMaxConns caps the PostgreSQL connection pool
	// (HARVEST_DATABASE_MAX_CONNS), default the driver's: the larger of 4
	// and the number of CPUs.
	DatabaseMaxConns int `yaml:"database_max_conns"`
	// AdminAddr is where the scheduler and the worker serve GET /healthz,
	// GET /readyz and GET /metrics (HARVEST_ADMIN_ADDR); empty serves
	// nothing. Ingest serves them on http_addr.
	AdminAddr string `yaml:"admin_addr"`
	// MetricsAddr is where a scheduler, a worker or ingest also serves
	// GET /metrics alone (HARVEST_METRICS_ADDR): for a scheduler or a
	// worker without admin_addr, or to keep Prometheus off the admin or
	// API address (ingest's /metrics there needs a token when the API has
	// tokens; this one does not). Empty serves nothing more.
	MetricsAddr string `yaml:"metrics_addr"`
	// HTTPAddr is ingest's and harvest dev's listen address
	// (HARVEST_HTTP_ADDR), default 127.0.0.1:8080.
	HTTPAddr string `yaml:"http_addr"`
	// Shards is the number of logical shards (HARVEST_SHARDS), default 16
	// (harvest dev: the count its state dir has, else 1); fixed for a
	// deployment's life.
	Shards int `yaml:"shards"`
	// OutcomeWait bounds how long a start waits for its outcome
	// (HARVEST_OUTCOME_WAIT), default 5s.
	OutcomeWait Duration `yaml:"outcome_wait"`
	// OutcomeTTL is how long a command's outcome stays readable with
	// GET /api/harvest/commands/{command_id} (HARVEST_OUTCOME_TTL), default
	// 24h, at least 2m. Outcomes are PostgreSQL rows, deleted by the
	// scheduler's sweep once expired.
	OutcomeTTL Duration `yaml:"outcome_ttl"`
	// WorkerTTL is how long a worker's registration of the workflows and
	// activities it serves lasts unrenewed (HARVEST_WORKER_TTL), default
	// 30s, at least 1s: the max age of the HARVEST_WORKERS bucket, which
	// the schedulers and ingest declare. Workers renew theirs every third
	// of it; a killed worker's lapse within it.
	WorkerTTL Duration `yaml:"worker_ttl"`
	// StartIdempotencyWindow is how long a start's idempotency claim lasts
	// (HARVEST_START_IDEMPOTENCY_WINDOW), default 24h.
	StartIdempotencyWindow Duration `yaml:"start_idempotency_window"`
	// Retention is how long a closed execution stays, counted from its
	// close, before the scheduler prunes it with everything that names it
	// (HARVEST_RETENTION), default 168h (7 days); workflows.<name>.retention
	// overrides it. Neither may be shorter than start_idempotency_window.
	Retention Duration `yaml:"retention"`
	// TaskQueue a worker pulls from (HARVEST_TASK_QUEUE), default "default".
	TaskQueue string `yaml:"task_queue"`
	// TaskAckWait bounds how long a task held by a worker that vanishes
	// waits before another worker gets it (HARVEST_TASK_ACK_WAIT), default
	// 5s, at least 1s. A worker acknowledges each task it holds as in
	// progress every third of it, so only a vanished (or cut off)
	// worker's tasks are delivered again: within task_ack_wait of its last
	// acknowledgement. Give every worker of a task queue the same value.
	TaskAckWait Duration `yaml:"task_ack_wait"`
	// ShutdownGrace is how long a worker told to stop (SIGTERM) lets its
	// running tasks finish (HARVEST_SHUTDOWN_GRACE), default 30s; then it
	// cancels them and hands their attempts back. Tasks it has not started
	// are handed back at once. Give the process at least this long, plus a
	// few seconds, before it is killed.
	ShutdownGrace Duration `yaml:"shutdown_grace"`
	// DisableEagerActivities makes workers leave every activity attempt to
	// the scheduler's dispatch (HARVEST_DISABLE_EAGER_ACTIVITIES=true),
	// instead of running attempt 1 of a workflow task's activities at
	// once (docs/activities.md, "Eager dispatch").
	DisableEagerActivities bool `yaml:"disable_eager_activities"`
	// WorkflowCacheSize is how many executions a worker keeps in memory
	// between their workflow tasks (HARVEST_WORKFLOW_CACHE_SIZE), default
	// 1000; -1 keeps none, every task then replaying its history
	// (docs/determinism.md).
	WorkflowCacheSize int `yaml:"workflow_cache_size"`
	// LeaseTTL is how long a scheduler's shard lease lasts unrenewed
	// (HARVEST_LEASE_TTL), default 5s.
	LeaseTTL Duration `yaml:"lease_ttl"`
	// WorkflowTaskTimeout is a dispatched workflow task's deadline
	// (HARVEST_WORKFLOW_TASK_TIMEOUT), default 10s: a task not completed
	// by then that the task stream no longer holds (it, or its result,
	// was lost) is dispatched again.
	WorkflowTaskTimeout Duration `yaml:"workflow_task_timeout"`
	// HistoryWarnEvents and HistoryWarnBytes are the warning thresholds
	// of an execution's history, its length in events and its size in
	// bytes (HARVEST_HISTORY_WARN_EVENTS, HARVEST_HISTORY_WARN_BYTES),
	// default 10000 and 10485760 (10 MiB): past either, the execution
	// carries a warning (its history_warning, a metric).
	// HistoryMaxEvents and HistoryMaxBytes are the hard limits
	// (HARVEST_HISTORY_MAX_EVENTS, HARVEST_HISTORY_MAX_BYTES), default
	// 50000 and 52428800 (50 MiB): past either, the execution fails with
	// HistoryLimitExceeded. HistorySuggestEvents and HistorySuggestBytes
	// (HARVEST_HISTORY_SUGGEST_EVENTS, HARVEST_HISTORY_SUGGEST_BYTES),
	// default 4096 and 4194304 (4 MiB), are where workflow code is told
	// to continue as new (harvest.WorkflowInfo.ContinueAsNewSuggested).
	// A threshold left unset is its default, or the hard limit when that
	// is lower; none may be above its hard limit. The scheduler enforces
	// them (docs/reliability.md#history-limits).
	HistoryWarnEvents    int   `yaml:"history_warn_events"`
	HistoryWarnBytes     int64 `yaml:"history_warn_bytes"`
	HistoryMaxEvents     int   `yaml:"history_max_events"`
	HistoryMaxBytes      int64 `yaml:"history_max_bytes"`
	HistorySuggestEvents int   `yaml:"history_suggest_events"`
	HistorySuggestBytes  int64 `yaml:"history_suggest_bytes"`
	// UpdateMaxInFlight and UpdateMaxPerRun bound an execution's updates
	// (HARVEST_UPDATE_MAX_IN_FLIGHT, HARVEST_UPDATE_MAX_PER_RUN), default
	// 10 and 2000: how many may be in flight at once, and how many one run
	// may be asked for; past either, an update is refused with 429
	// update_limit (docs/long-workflows.md#updating-a-running-workflow).
	UpdateMaxInFlight int `yaml:"update_max_in_flight"`
	UpdateMaxPerRun   int `yaml:"update_max_per_run"`
	// IdempotencyFingerprint is "reject" to refuse a keyed start retried
	// with a different input (422 idempotency_key_reused), or "ignore"
	// (default) to answer it with the original execution
	// (HARVEST_IDEMPOTENCY_FINGERPRINT).
	IdempotencyFingerprint string `yaml:"idempotency_fingerprint"`
	// CallbackAllowHosts are host names or CIDRs that completion callbacks
	// may target although they are not public addresses.
	CallbackAllowHosts []string `yaml:"callback_allow_hosts"`
	// Webhooks are the sources POST /hooks/{source} accepts, with their
	// routing rules.
	Webhooks []webhook.Endpoint `yaml:"webhooks"`
	// Bindings route messages of the user's own JetStream streams to
	// workflows, with the same rules as webhooks; ingest runs them.
	Bindings []binding.Binding `yaml:"bindings"`
	// ArcFlow configures the ArcFlow-compatible /v1/runs routes.
	ArcFlow ArcFlowConfig `yaml:"arcflow"`
	// MaxBodyBytes caps an API request's body (HARVEST_MAX_BODY_BYTES),
	// default 1 MiB; webhook sources have their own max_body_bytes.
	MaxBodyBytes int64 `yaml:"max_body_bytes"`
	// MaxInFlight bounds the API requests ingest serves at once
	// (HARVEST_MAX_IN_FLIGHT), default 1024; past it, 503 with Retry-After.
	MaxInFlight int `yaml:"max_in_flight"`
	// WebhookMaxInFlight bounds, for each webhook source and for the
	// ArcFlow callbacks signed with arcflow.secrets, the requests whose
	// bodies ingest reads at once and those it serves at once
	// (HARVEST_WEBHOOK_MAX_IN_FLIGHT), default 128. They never take a slot
	// of max_in_flight (docs/security.md, "Budgets").
	WebhookMaxInFlight int `yaml:"webhook_max_in_flight"`
	// UnauthenticatedMaxInFlight bounds the same for the other requests
	// without a valid token: the console, /openapi.json, API requests
	// answered 401 (HARVEST_UNAUTHENTICATED_MAX_IN_FLIGHT), default 128.
	UnauthenticatedMaxInFlight int `yaml:"unauthenticated_max_in_flight"`
	// DBReadTimeout bounds each read of PostgreSQL an API request makes
	// (HARVEST_DB_READ_TIMEOUT), default 5s; past it the request is
	// answered 503 with Retry-After.
	DBReadTimeout Duration `yaml:"db_read_timeout"`
	// Auth configures the API's bearer tokens (docs/security.md).
	Auth AuthConfig `yaml:"auth"`
	// AllowedHosts are the host names, IP addresses or CIDRs that a
	// request's Host header may name besides loopback ones. While the API
	// needs no token, ingest answers only loopback names and addresses
	// and these (421 host_not_allowed to any other: a web page's own name
	// rebound to 127.0.0.1); with tokens, any Host unless this is set
	// (docs/security.md).
	AllowedHosts []string `yaml:"allowed_hosts"`
	// Console configures the web console's sign-in (docs/console.md).
	Console ConsoleConfig `yaml:"console"`
	// Workflows holds per-workflow settings. A workflow named here is
	// declared: ingest accepts its starts while no worker serves it (the
	// execution waits for one), where a start of a workflow that no live
	// worker has registered and the configuration does not name is
	// answered 404 unknown_workflow. `workflows: {onboarding: {}}`
	// declares one with no settings. Webhook and binding rules' target
	// workflows are declared too.
	Workflows map[string]WorkflowConfig `yaml:"workflows"`
	// Schedules are schedules the configuration declares, by id
	// (docs/schedules.md): ingest creates or replaces each at start-up,
	// and deletes those it declared before and no longer does. A
	// schedule made through the API with the same id is replaced.
	Schedules map[string]ScheduleConfig `yaml:"schedules"`
	// FakepayURL is where the example workflows' payment provider is
	// served (`harvest fakepay`), for cmd/worker (HARVEST_FAKEPAY_URL);
	// empty keeps one in the worker's memory.
	FakepayURL string `yaml:"fakepay_url"`
	// LogLevel is debug, info, warn or error (HARVEST_LOG_LEVEL), default
	// info.
	LogLevel string `yaml:"log_level"`
	// LogFormat is text (logfmt, the default) or json, one object a line
	// (HARVEST_LOG_FORMAT).
	LogFormat string `yaml:"log_format"`
}

// Load reads path (if not empty) and applies the environment over it.
func Load(path string) (Config, error) { return LoadEnv(path, os.Getenv) }

// LoadEnv is Load with the environment read through getenv: a command
// line's flags stand in for the variables they override that way, so that
// a flag, its variable and its key are read and checked alike.
func LoadEnv(path string, getenv func(string) string) (Config, error) {
	var c Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return c, fmt.Errorf("read config: %w", err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		dec.KnownFields(true)
		if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
			return c, fmt.Errorf("config %s: %w", path, err)
		}
	}
	if err := c.applyEnv(getenv); err != nil {
		return c, err
	}
	if c.HTTPAddr == "" {
		c.HTTPAddr = "127.0.0.1:8080"
	}
	if err := c.Validate(); err != nil {
		return c, err
	}
	return c, c.readSecretFiles()
}
