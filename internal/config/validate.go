package config

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/harvest-engine/harvest/internal/binding"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/searchattr"
	"github.com/harvest-engine/harvest/internal/startpolicy"
	"github.com/harvest-engine/harvest/internal/wire"
)

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
	if err := c.validateHistoryLimits(); err != nil {
		return err
	}
	for name, w := range c.Workflows {
		if err := dedup.ValidateName(name); err != nil {
			return fmt.Errorf("config: workflows: %w", err)
		}
		if g := time.Duration(w.CancelGrace); g < 0 || (g > 0 && g < time.Millisecond) || g > 10*365*24*time.Hour {
			return fmt.Errorf("config: workflows.%s.cancel_grace %s: want a duration from 1ms to ten years", name, time.Duration(w.CancelGrace))
		}
		if err := (scheduler.WorkflowTimeouts{Run: time.Duration(w.RunTimeout), Execution: time.Duration(w.ExecutionTimeout)}).Validate(); err != nil {
			return fmt.Errorf("config: workflows.%s: %w", name, err)
		}
		if w.Retention < 0 {
			return fmt.Errorf("config: workflows.%s.retention %s: want a positive duration", name, time.Duration(w.Retention))
		}
		if len(w.SearchAttributes) > searchattr.MaxPerExecution {
			return fmt.Errorf("config: workflows.%s.search_attributes: %d declared, at most %d", name, len(w.SearchAttributes), searchattr.MaxPerExecution)
		}
		for _, attr := range slices.Sorted(maps.Keys(w.SearchAttributes)) {
			if err := searchattr.ValidName(attr); err != nil {
				return fmt.Errorf("config: workflows.%s.search_attributes: %w", name, err)
			}
			if typ := w.SearchAttributes[attr]; !searchattr.ValidType(typ) {
				return fmt.Errorf("config: workflows.%s.search_attributes.%s %q: want %s", name, attr, typ, strings.Join(searchattr.Types, ", "))
			}
		}
		if w.TaskQueue != "" && dedup.ValidateName(w.TaskQueue) != nil {
			return fmt.Errorf("config: workflows.%s.task_queue %q: want a task queue name, 1 to %d bytes of letters, digits, '_' and '-'",
				name, w.TaskQueue, dedup.MaxNameBytes)
		}
		switch w.Versioning {
		case "", wire.VersioningPinned, wire.VersioningAutoUpgrade:
		default:
			return fmt.Errorf("config: workflows.%s.versioning %q: want pinned or auto_upgrade", name, w.Versioning)
		}
		if _, err := startpolicy.Parse(w.StartPolicy); err != nil {
			var perr *startpolicy.Error
			if errors.As(err, &perr) && perr.Field != "" {
				return fmt.Errorf("config: workflows.%s.start_policy.%s: %s", name, perr.Field, perr.Message)
			}
			return fmt.Errorf("config: workflows.%s.start_policy: %w", name, err)
		}
	}
	if err := c.validateSchedules(); err != nil {
		return err
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
