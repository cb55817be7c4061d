package config

import (
	"errors"
	"fmt"
	"strconv"
	"time"
)

func (c *Config) applyEnv(get func(string) string) error {
	str := func(dst *string, name string) {
		if v := get(name); v != "" {
			*dst = v
		}
	}
	dur := func(dst *Duration, name string) error {
		return fromEnv(get, dst, name, func(v string) (Duration, error) {
			d, err := time.ParseDuration(v)
			return Duration(d), err
		})
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
	if err := fromEnv(get, &c.DisableEagerActivities, "HARVEST_DISABLE_EAGER_ACTIVITIES", strconv.ParseBool); err != nil {
		return err
	}
	num := func(dst *int, name string) error { return fromEnv(get, dst, name, strconv.Atoi) }
	num64 := func(dst *int64, name string) error {
		return fromEnv(get, dst, name, func(v string) (int64, error) { return strconv.ParseInt(v, 10, 64) })
	}
	return errors.Join(
		num(&c.Shards, "HARVEST_SHARDS"),
		num(&c.NATSReplicas, "HARVEST_NATS_REPLICAS"),
		num(&c.DatabaseMaxConns, "HARVEST_DATABASE_MAX_CONNS"),
		num(&c.MaxInFlight, "HARVEST_MAX_IN_FLIGHT"),
		num(&c.WebhookMaxInFlight, "HARVEST_WEBHOOK_MAX_IN_FLIGHT"),
		num(&c.UnauthenticatedMaxInFlight, "HARVEST_UNAUTHENTICATED_MAX_IN_FLIGHT"),
		num(&c.WorkflowCacheSize, "HARVEST_WORKFLOW_CACHE_SIZE"),
		num(&c.HistoryWarnEvents, "HARVEST_HISTORY_WARN_EVENTS"),
		num(&c.HistoryMaxEvents, "HARVEST_HISTORY_MAX_EVENTS"),
		num(&c.HistorySuggestEvents, "HARVEST_HISTORY_SUGGEST_EVENTS"),
		num(&c.UpdateMaxInFlight, "HARVEST_UPDATE_MAX_IN_FLIGHT"),
		num(&c.UpdateMaxPerRun, "HARVEST_UPDATE_MAX_PER_RUN"),
		num64(&c.HistoryWarnBytes, "HARVEST_HISTORY_WARN_BYTES"),
		num64(&c.HistoryMaxBytes, "HARVEST_HISTORY_MAX_BYTES"),
		num64(&c.HistorySuggestBytes, "HARVEST_HISTORY_SUGGEST_BYTES"),
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

// fromEnv sets *dst to the environment variable name's value, read with
// get and parsed by parse, when the variable is set; a value that does
// not parse is an error naming the variable, and leaves *dst as it was.
func fromEnv[T any](get func(string) string, dst *T, name string, parse func(string) (T, error)) error {
	if v := get(name); v != "" {
		x, err := parse(v)
		if err != nil {
			return fmt.Errorf("%s: %w", name, err)
		}
		*dst = x
	}
	return nil
}
