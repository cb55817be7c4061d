package config

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/harvest-engine/harvest/client"
	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/startpolicy"
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

// ArcFlowConfig is the ArcFlow-compatible part of Config.
type ArcFlowConfig struct {
	// Secrets, when set, make external callbacks
	// (POST /v1/runs/{run_id}/external/{binding_id}) require
	// X-Harvest-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of the
	// timestamp, method, path, idempotency key and body> under one of
	// them, its timestamp within 5 minutes; several are accepted at once,
	// for rotation (HARVEST_ARCFLOW_SECRET sets one).
	Secrets []string `yaml:"secrets"`
	// LegacyBodyOnlySignatures also takes callbacks signed the old way,
	// X-ArcFlow-Signature: sha256=<hex HMAC-SHA256 of the body>. Unsafe:
	// such a signature binds nothing but the body, so a captured callback
	// can be replayed to any run, binding and key, at any time.
	LegacyBodyOnlySignatures bool `yaml:"legacy_body_only_signatures"`
}

// ConsoleConfig is the web console's part of Config.
type ConsoleConfig struct {
	// TrustedProxies are the proxies (IP addresses or CIDRs) whose
	// X-Forwarded-Proto: https says that the console's user came over
	// TLS, so that the session cookie is marked Secure.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// SessionTTL is how long a console sign-in lasts, default 12h.
	SessionTTL Duration `yaml:"session_ttl"`
}

// AuthConfig is the API's authentication: the bearer tokens ingest
// accepts on /api/harvest/... and /v1/runs... . Without tokens the API is
// open, which a process listening beyond loopback refuses unless Disabled
// says so.
type AuthConfig struct {
	// Disabled serves the API without authentication even on a
	// non-loopback address.
	Disabled bool `yaml:"disabled"`
	// Tokens are the accepted tokens; several at once, for rotation.
	Tokens []TokenConfig `yaml:"tokens"`
}

// TokenConfig is one accepted token, by its hash or a file holding it.
type TokenConfig struct {
	// Name names the token in logs, refusals and the executions it starts.
	Name string `yaml:"name"`
	// SHA256 is the hex SHA-256 of the token (harvest token hash).
	SHA256 string `yaml:"sha256"`
	// TokenFile is a file holding the token itself, instead of SHA256.
	TokenFile string `yaml:"token_file"`
	// Scopes: start, signal, read, cancel, metrics, admin.
	Scopes []string `yaml:"scopes"`
	// Workflows, when set, limits the token to these workflows, for reads
	// too.
	Workflows []string `yaml:"workflows"`
}

// Enabled says whether the API requires a token.
func (a AuthConfig) Enabled() bool { return len(a.Tokens) > 0 }

// validate checks what it can without reading the token files.
func (a AuthConfig) validate() error {
	if a.Disabled && len(a.Tokens) > 0 {
		return errors.New("config: auth: disabled with tokens: remove one")
	}
	_, err := a.tokens(func(TokenConfig) (string, error) { return "", nil })
	return err
}

// Authenticator reads the token files and returns the tokens'
// authenticator, nil when the API is open.
func (a AuthConfig) Authenticator() (*auth.Authenticator, error) {
	if !a.Enabled() {
		return nil, nil
	}
	tokens, err := a.tokens(func(t TokenConfig) (string, error) {
		data, err := os.ReadFile(t.TokenFile)
		if err != nil {
			return "", fmt.Errorf("config: auth token %q: %w", t.Name, err)
		}
		token := strings.TrimSpace(string(data))
		if token == "" {
			return "", fmt.Errorf("config: auth token %q: %s is empty", t.Name, t.TokenFile)
		}
		return token, nil
	})
	if err != nil {
		return nil, err
	}
	a2, err := auth.New(tokens)
	if err != nil {
		return nil, fmt.Errorf("config: auth: %w", err)
	}
	return a2, nil
}

// tokens converts the configured tokens, reading a token_file with read.
func (a AuthConfig) tokens(read func(TokenConfig) (string, error)) ([]auth.Token, error) {
	out := make([]auth.Token, 0, len(a.Tokens))
	names := map[string]bool{}
	for i, t := range a.Tokens {
		what := fmt.Sprintf("config: auth.tokens[%d]", i)
		if t.Name != "" {
			what = fmt.Sprintf("config: auth token %q", t.Name)
		}
		tok := auth.Token{Name: t.Name, Workflows: t.Workflows}
		switch {
		case t.Name == "":
			return nil, fmt.Errorf("%s: name is required", what)
		case names[t.Name]:
			return nil, fmt.Errorf("%s: name used twice", what)
		case (t.SHA256 == "") == (t.TokenFile == ""):
			return nil, fmt.Errorf("%s: set one of sha256 and token_file", what)
		case len(t.Scopes) == 0:
			return nil, fmt.Errorf("%s: scopes are required (start, signal, read, cancel, metrics, admin)", what)
		case t.SHA256 != "":
			h, err := auth.ParseHash(t.SHA256)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			tok.SHA256 = h
		default:
			token, err := read(t)
			if err != nil {
				return nil, err
			}
			tok.SHA256 = auth.Hash(token)
		}
		for _, s := range t.Scopes {
			sc, err := auth.ParseScope(s)
			if err != nil {
				return nil, fmt.Errorf("%s: %w", what, err)
			}
			tok.Scopes = append(tok.Scopes, sc)
		}
		names[t.Name] = true
		for _, w := range t.Workflows {
			if err := dedup.ValidateName(w); err != nil {
				return nil, fmt.Errorf("%s: workflows: %w", what, err)
			}
		}
		out = append(out, tok)
	}
	return out, nil
}

// StoreConfig is one PostgreSQL store of Config.Stores.
type StoreConfig struct {
	Name            string `yaml:"name"`
	DatabaseURL     string `yaml:"database_url"`
	DatabaseURLFile string `yaml:"database_url_file"`
	// Mode is writable (the default) or read_only: a draining store
	// serves its executions to completion and takes no new ones.
	Mode string `yaml:"mode"`
}

// StoreSet is the stores of the configuration, nil for one database_url.
func (c Config) StoreSet() (*placement.Set, error) {
	if len(c.Stores) == 0 {
		return nil, nil
	}
	list := make([]placement.Store, len(c.Stores))
	for i, st := range c.Stores {
		list[i] = placement.Store{Name: st.Name, Mode: placement.Mode(cmp.Or(st.Mode, string(placement.Writable)))}
	}
	set, err := placement.New(list)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return set, nil
}

// StoreURLs are the database URLs of the stores, in their order: the
// stores', or database_url alone.
func (c Config) StoreURLs() []string {
	if len(c.Stores) == 0 {
		return []string{c.DatabaseURL}
	}
	urls := make([]string, len(c.Stores))
	for i, st := range c.Stores {
		urls[i] = st.DatabaseURL
	}
	return urls
}

// WorkflowConfig is the per-workflow part of Config.
type WorkflowConfig struct {
	// IdempotencyFingerprint overrides the deployment's setting.
	IdempotencyFingerprint string `yaml:"idempotency_fingerprint"`
	// Retention overrides the deployment's retention for this workflow's
	// closed executions.
	Retention Duration `yaml:"retention"`
	// StartPolicy throttles, debounces or batches the workflow's starts
	// (docs/start-policies.md).
	StartPolicy *client.StartPolicy `yaml:"start_policy"`
	// TaskQueue is the task queue the workflow's starts go to when the
	// start names none (every start ingest makes: the API's, webhook and
	// binding rules', ArcFlow runs), default "default". A declared
	// workflow is accepted on this queue while no worker serves it.
	TaskQueue string `yaml:"task_queue"`
}

// DeclaredWorkflows are the workflows the configuration declares: those
// under workflows, and the targets of the bindings' rules (ingest adds
// the webhooks' own).
func (c Config) DeclaredWorkflows() []string {
	out := make([]string, 0, len(c.Workflows))
	for name := range c.Workflows {
		out = append(out, name)
	}
	slices.Sort(out)
	return append(out, binding.Workflows(c.Bindings)...)
}

// RetentionByWorkflow returns the per-workflow retentions.
func (c Config) RetentionByWorkflow() map[string]time.Duration {
	out := map[string]time.Duration{}
	for name, w := range c.Workflows {
		if w.Retention > 0 {
			out[name] = time.Duration(w.Retention)
		}
	}
	return out
}

// StartPolicies returns the workflows' start policies, checked (Validate
// reports one that is not).
func (c Config) StartPolicies() map[string]*startpolicy.Policy {
	out := map[string]*startpolicy.Policy{}
	for name, w := range c.Workflows {
		if p, err := startpolicy.Parse(w.StartPolicy); err == nil && p != nil {
			out[name] = p
		}
	}
	return out
}

// TaskQueues returns the workflows' configured task queues, by workflow;
// a workflow with none is absent (its starts go to "default").
func (c Config) TaskQueues() map[string]string {
	out := map[string]string{}
	for name, w := range c.Workflows {
		if w.TaskQueue != "" {
			out[name] = w.TaskQueue
		}
	}
	return out
}

// FingerprintByWorkflow returns the per-workflow fingerprint modes.
func (c Config) FingerprintByWorkflow() map[string]string {
	out := map[string]string{}
	for name, w := range c.Workflows {
		if w.IdempotencyFingerprint != "" {
			out[name] = w.IdempotencyFingerprint
		}
	}
	return out
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

// secretFile is a secret read from path into dst, for key.
type secretFile struct {
	key  string
	path string
	dst  *string
}

// readSecretFiles reads the secrets given as files into their fields, so
// that a secret never has to sit in the configuration itself. Surrounding
// white space (a trailing newline) is dropped.
func (c *Config) readSecretFiles() error {
	secrets := []secretFile{
		{"nats_password_file", c.NATSPasswordFile, &c.NATSPassword},
		{"nats_token_file", c.NATSTokenFile, &c.NATSToken},
		{"database_url_file", c.DatabaseURLFile, &c.DatabaseURL},
	}
	for i := range c.Stores {
		secrets = append(secrets, secretFile{fmt.Sprintf("stores[%d].database_url_file", i), c.Stores[i].DatabaseURLFile, &c.Stores[i].DatabaseURL})
	}
	for _, s := range secrets {
		if s.path == "" {
			continue
		}
		data, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("config: %s: %w", s.key, err)
		}
		if *s.dst = string(bytes.TrimSpace(data)); *s.dst == "" {
			return fmt.Errorf("config: %s: %s is empty", s.key, s.path)
		}
	}
	return nil
}

func (c *Config) applyEnv(get func(string) string) error {
	str := func(dst *string, name string) {
		if v := get(name); v != "" {
			*dst = v
		}
	}
	dur := func(dst *Duration, name string) error {
		if v := get(name); v != "" {
			d, err := time.ParseDuration(v)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			*dst = Duration(d)
		}
		return nil
	}
	str(&c.NATSURL, "HARVEST_NATS_URL")
	str(&c.NATSCredentialsFile, "HARVEST_NATS_CREDENTIALS_FILE")
	str(&c.NATSNkeyFile, "HARVEST_NATS_NKEY_FILE")
	str(&c.NATSUser, "HARVEST_NATS_USER")
	str(&c.NATSPassword, "HARVEST_NATS_PASSWORD")
	str(&c.NATSPasswordFile, "HARVEST_NATS_PASSWORD_FILE")
	str(&c.NATSToken, "HARVEST_NATS_TOKEN")
	str(&c.NATSTokenFile, "HARVEST_NATS_TOKEN_FILE")
	str(&c.NATSTLSCAFile, "HARVEST_NATS_TLS_CA_FILE")
	str(&c.NATSTLSCertFile, "HARVEST_NATS_TLS_CERT_FILE")
	str(&c.NATSTLSKeyFile, "HARVEST_NATS_TLS_KEY_FILE")
	str(&c.DatabaseURL, "HARVEST_DATABASE_URL")
	str(&c.DatabaseURLFile, "HARVEST_DATABASE_URL_FILE")
	str(&c.AdminAddr, "HARVEST_ADMIN_ADDR")
	str(&c.MetricsAddr, "HARVEST_METRICS_ADDR")
	str(&c.FakepayURL, "HARVEST_FAKEPAY_URL")
	str(&c.HTTPAddr, "HARVEST_HTTP_ADDR")
	str(&c.TaskQueue, "HARVEST_TASK_QUEUE")
	str(&c.LogLevel, "HARVEST_LOG_LEVEL")
	str(&c.LogFormat, "HARVEST_LOG_FORMAT")
	str(&c.IdempotencyFingerprint, "HARVEST_IDEMPOTENCY_FINGERPRINT")
	if v := get("HARVEST_ARCFLOW_SECRET"); v != "" {
		c.ArcFlow.Secrets = []string{v}
	}
	if v := get("HARVEST_DISABLE_EAGER_ACTIVITIES"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return fmt.Errorf("HARVEST_DISABLE_EAGER_ACTIVITIES: %w", err)
		}
		c.DisableEagerActivities = b
	}
	num := func(dst *int, name string) error {
		if v := get(name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			*dst = n
		}
		return nil
	}
	num64 := func(dst *int64, name string) error {
		if v := get(name); v != "" {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			*dst = n
		}
		return nil
	}
	return errors.Join(
		num(&c.Shards, "HARVEST_SHARDS"),
		num(&c.NATSReplicas, "HARVEST_NATS_REPLICAS"),
		num(&c.DatabaseMaxConns, "HARVEST_DATABASE_MAX_CONNS"),
		num(&c.MaxInFlight, "HARVEST_MAX_IN_FLIGHT"),
		num(&c.WebhookMaxInFlight, "HARVEST_WEBHOOK_MAX_IN_FLIGHT"),
		num(&c.UnauthenticatedMaxInFlight, "HARVEST_UNAUTHENTICATED_MAX_IN_FLIGHT"),
		num(&c.WorkflowCacheSize, "HARVEST_WORKFLOW_CACHE_SIZE"),
		num64(&c.MaxBodyBytes, "HARVEST_MAX_BODY_BYTES"),
		num64(&c.NATSCommandStreamMaxBytes, "HARVEST_NATS_COMMAND_STREAM_MAX_BYTES"),
		num64(&c.NATSTaskStreamMaxBytes, "HARVEST_NATS_TASK_STREAM_MAX_BYTES"),
		dur(&c.OutcomeWait, "HARVEST_OUTCOME_WAIT"),
		dur(&c.DBReadTimeout, "HARVEST_DB_READ_TIMEOUT"),
		dur(&c.OutcomeTTL, "HARVEST_OUTCOME_TTL"),
		dur(&c.WorkerTTL, "HARVEST_WORKER_TTL"),
		dur(&c.StartIdempotencyWindow, "HARVEST_START_IDEMPOTENCY_WINDOW"),
		dur(&c.Retention, "HARVEST_RETENTION"),
		dur(&c.TaskAckWait, "HARVEST_TASK_ACK_WAIT"),
		dur(&c.ShutdownGrace, "HARVEST_SHUTDOWN_GRACE"),
		dur(&c.LeaseTTL, "HARVEST_LEASE_TTL"),
		dur(&c.WorkflowTaskTimeout, "HARVEST_WORKFLOW_TASK_TIMEOUT"),
	)
}

// Validate names the first bad field.
func (c Config) Validate() error {
	switch {
	case c.Shards < 0:
		return fmt.Errorf("config: shards %d: want a positive number", c.Shards)
	case c.OutcomeWait < 0:
		return fmt.Errorf("config: outcome_wait %s: want a positive duration", time.Duration(c.OutcomeWait))
	case c.OutcomeTTL < 0:
		return fmt.Errorf("config: outcome_ttl %s: want a positive duration", time.Duration(c.OutcomeTTL))
	case c.WorkerTTL != 0 && c.WorkerTTL < Duration(time.Second):
		return fmt.Errorf("config: worker_ttl %s: want at least 1s", time.Duration(c.WorkerTTL))
	case c.StartIdempotencyWindow < 0:
		return fmt.Errorf("config: start_idempotency_window %s: want a positive duration", time.Duration(c.StartIdempotencyWindow))
	case c.Retention < 0:
		return fmt.Errorf("config: retention %s: want a positive duration", time.Duration(c.Retention))
	case c.WorkflowTaskTimeout < 0 || (c.WorkflowTaskTimeout > 0 && c.WorkflowTaskTimeout < Duration(100*time.Millisecond)):
		return fmt.Errorf("config: workflow_task_timeout %s: want at least 100ms", time.Duration(c.WorkflowTaskTimeout))
	case c.TaskAckWait != 0 && c.TaskAckWait < Duration(time.Second):
		return fmt.Errorf("config: task_ack_wait %s: want at least 1s", time.Duration(c.TaskAckWait))
	case c.ShutdownGrace < 0:
		return fmt.Errorf("config: shutdown_grace %s: want a positive duration", time.Duration(c.ShutdownGrace))
	case c.NATSReplicas < 0 || c.NATSReplicas > 5:
		return fmt.Errorf("config: nats_replicas %d: want 1 to 5", c.NATSReplicas)
	case c.NATSCommandStreamMaxBytes < 0 || (c.NATSCommandStreamMaxBytes > 0 && c.NATSCommandStreamMaxBytes < broker.MinStreamMaxBytes):
		return fmt.Errorf("config: nats_command_stream_max_bytes %d: want at least %d (4 MiB)", c.NATSCommandStreamMaxBytes, broker.MinStreamMaxBytes)
	case c.NATSTaskStreamMaxBytes < 0 || (c.NATSTaskStreamMaxBytes > 0 && c.NATSTaskStreamMaxBytes < broker.MinStreamMaxBytes):
		return fmt.Errorf("config: nats_task_stream_max_bytes %d: want at least %d (4 MiB)", c.NATSTaskStreamMaxBytes, broker.MinStreamMaxBytes)
	case c.MaxBodyBytes < 0:
		return fmt.Errorf("config: max_body_bytes %d: want a positive size", c.MaxBodyBytes)
	case c.WorkflowCacheSize < -1:
		return fmt.Errorf("config: workflow_cache_size %d: want a number of executions, or -1 for none", c.WorkflowCacheSize)
	case c.MaxInFlight < 0:
		return fmt.Errorf("config: max_in_flight %d: want a positive number", c.MaxInFlight)
	case c.WebhookMaxInFlight < 0:
		return fmt.Errorf("config: webhook_max_in_flight %d: want a positive number", c.WebhookMaxInFlight)
	case c.UnauthenticatedMaxInFlight < 0:
		return fmt.Errorf("config: unauthenticated_max_in_flight %d: want a positive number", c.UnauthenticatedMaxInFlight)
	case c.DBReadTimeout < 0 || (c.DBReadTimeout > 0 && c.DBReadTimeout < Duration(100*time.Millisecond)):
		return fmt.Errorf("config: db_read_timeout %s: want at least 100ms", time.Duration(c.DBReadTimeout))
	case c.DatabaseMaxConns < 0:
		return fmt.Errorf("config: database_max_conns %d: want a positive number", c.DatabaseMaxConns)
	case c.NATSPassword != "" && c.NATSPasswordFile != "":
		return errors.New("config: nats_password and nats_password_file: set one")
	case c.NATSToken != "" && c.NATSTokenFile != "":
		return errors.New("config: nats_token and nats_token_file: set one")
	case c.DatabaseURL != "" && c.DatabaseURLFile != "":
		return errors.New("config: database_url and database_url_file: set one")
	case len(c.Stores) > 0 && (c.DatabaseURL != "" || c.DatabaseURLFile != ""):
		return errors.New("config: stores and database_url (or HARVEST_DATABASE_URL): set one; the first store is the one database_url would be")
	case c.MetricsAddr != "" && c.MetricsAddr == c.AdminAddr:
		return fmt.Errorf("config: metrics_addr %s is admin_addr, which serves /metrics already: leave metrics_addr empty or give it an address of its own", c.MetricsAddr)
	case (c.NATSTLSCertFile == "") != (c.NATSTLSKeyFile == ""):
		return errors.New("config: nats_tls_cert_file and nats_tls_key_file: set both or neither")
	case c.NATSUser == "" && (c.NATSPassword != "" || c.NATSPasswordFile != ""):
		return errors.New("config: nats_password without nats_user")
	}
	for i, sec := range c.ArcFlow.Secrets {
		if sec == "" {
			return fmt.Errorf("config: arcflow.secrets[%d] is empty", i)
		}
	}
	if c.ArcFlow.LegacyBodyOnlySignatures && len(c.ArcFlow.Secrets) == 0 {
		return errors.New("config: arcflow.legacy_body_only_signatures without arcflow.secrets: there is no signature to take the old way")
	}
	if err := c.Auth.validate(); err != nil {
		return err
	}
	for name, w := range c.Workflows {
		if err := dedup.ValidateName(name); err != nil {
			return fmt.Errorf("config: workflows: %w", err)
		}
		if w.Retention < 0 {
			return fmt.Errorf("config: workflows.%s.retention %s: want a positive duration", name, time.Duration(w.Retention))
		}
		if w.TaskQueue != "" && dedup.ValidateName(w.TaskQueue) != nil {
			return fmt.Errorf("config: workflows.%s.task_queue %q: want a task queue name, 1 to %d bytes of letters, digits, '_' and '-'",
				name, w.TaskQueue, dedup.MaxNameBytes)
		}
		if _, err := startpolicy.Parse(w.StartPolicy); err != nil {
			var perr *startpolicy.Error
			if errors.As(err, &perr) && perr.Field != "" {
				return fmt.Errorf("config: workflows.%s.start_policy.%s: %s", name, perr.Field, perr.Message)
			}
			return fmt.Errorf("config: workflows.%s.start_policy: %w", name, err)
		}
	}
	for i, st := range c.Stores {
		if (st.DatabaseURL == "") == (st.DatabaseURLFile == "") {
			return fmt.Errorf("config: stores[%d] (%s): set one of database_url and database_url_file", i, st.Name)
		}
	}
	if _, err := c.StoreSet(); err != nil {
		return err
	}
	if err := binding.ValidateAll(c.Bindings); err != nil {
		return fmt.Errorf("config: %w", err)
	}
	if _, err := c.Level(); err != nil {
		return err
	}
	switch c.LogFormat {
	case "", LogFormatText, LogFormatJSON:
	default:
		return fmt.Errorf("config: log_format %q: want %s or %s", c.LogFormat, LogFormatText, LogFormatJSON)
	}
	return nil
}

// The values of log_format.
const (
	LogFormatText = "text"
	LogFormatJSON = "json"
)

// Level is the configured log level.
func (c Config) Level() (slog.Level, error) {
	var l slog.Level
	if c.LogLevel == "" {
		return slog.LevelInfo, nil
	}
	if err := l.UnmarshalText([]byte(c.LogLevel)); err != nil {
		return l, fmt.Errorf("config: log_level %q: want debug, info, warn or error", c.LogLevel)
	}
	return l, nil
}

// Logger builds a process's logger: text (logfmt) or JSON lines, as
// log_format says, on w (a process's stderr) at the configured level.
func (c Config) Logger(w io.Writer) *slog.Logger {
	l, _ := c.Level()
	opts := &slog.HandlerOptions{Level: l}
	if c.LogFormat == LogFormatJSON {
		return slog.New(slog.NewJSONHandler(w, opts))
	}
	return slog.New(slog.NewTextHandler(w, opts))
}
