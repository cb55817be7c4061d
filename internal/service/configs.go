package service

import (
	"cmp"
	"time"

	"github.com/harvest-engine/harvest"
	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/callback"
	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/scheduler"
	"github.com/harvest-engine/harvest/internal/store"
)

// The one translation of the configuration file into each service's
// Config, shared by the service binaries, harvest dev and harvest bench.
// Connections, the topology and loggers are the caller's to fill in.

// StreamsConfig is the topology the configuration declares. The
// deployment's retention (not the per-workflow ones: there is one ledger
// and one task stream) is the max age of the effect ledger and the task
// stream, with the scheduler's default.
func StreamsConfig(cfg config.Config) broker.Config {
	set, _ := cfg.StoreSet() // checked as the configuration loaded
	return broker.Config{Shards: cfg.Shards, Stores: set, OutcomeTTL: time.Duration(cfg.OutcomeTTL), WorkerTTL: time.Duration(cfg.WorkerTTL),
		Replicas: cfg.NATSReplicas, Retention: cmp.Or(time.Duration(cfg.Retention), scheduler.DefaultRetention),
		CommandMaxBytes: cfg.NATSCommandStreamMaxBytes, TaskMaxBytes: cfg.NATSTaskStreamMaxBytes}
}

// PoolOptions are the PostgreSQL pool's settings beyond database_url.
func PoolOptions(cfg config.Config) store.PoolOptions {
	return store.PoolOptions{MaxConns: cfg.DatabaseMaxConns}
}

// SchedulerConfig is the scheduler the configuration describes.
func SchedulerConfig(cfg config.Config) scheduler.Config {
	return scheduler.Config{
		LeaseTTL:               time.Duration(cfg.LeaseTTL),
		StartIdempotencyWindow: time.Duration(cfg.StartIdempotencyWindow),
		WorkflowTaskTimeout:    time.Duration(cfg.WorkflowTaskTimeout),
		Retention:              time.Duration(cfg.Retention),
		RetentionByWorkflow:    cfg.RetentionByWorkflow(),
		PinnedWorkflows:        cfg.PinnedWorkflows(),
		CancelGraceByWorkflow:  cfg.CancelGraceByWorkflow(),
		TimeoutsByWorkflow:     cfg.TimeoutsByWorkflow(),
		SearchAttributes:       cfg.SearchAttributes(),
		DeclaredWorkflows:      cfg.DeclaredWorkflowQueues(),
		HistoryLimits:          cfg.HistoryLimits(),
		CallbackPolicy:         callback.Policy{AllowHosts: cfg.CallbackAllowHosts},
	}
}

// IngestConfig is the HTTP API the configuration describes.
func IngestConfig(cfg config.Config) ingest.Config {
	// Checked as the configuration was loaded.
	schedules, _ := cfg.ScheduleRequests()
	return ingest.Config{
		Schedules:                  schedules,
		OutcomeWait:                time.Duration(cfg.OutcomeWait),
		IdempotencyFingerprint:     cfg.IdempotencyFingerprint,
		FingerprintByWorkflow:      cfg.FingerprintByWorkflow(),
		StartPolicies:              cfg.StartPolicies(),
		TaskQueues:                 cfg.TaskQueues(),
		DeclaredWorkflows:          cfg.DeclaredWorkflows(),
		SearchAttributes:           cfg.SearchAttributes(),
		CallbackPolicy:             callback.Policy{AllowHosts: cfg.CallbackAllowHosts},
		Webhooks:                   cfg.Webhooks,
		ArcFlowSecrets:             cfg.ArcFlow.Secrets,
		ArcFlowLegacyBodyOnly:      cfg.ArcFlow.LegacyBodyOnlySignatures,
		MaxBodyBytes:               cfg.MaxBodyBytes,
		MaxInFlight:                cfg.MaxInFlight,
		WebhookMaxInFlight:         cfg.WebhookMaxInFlight,
		UnauthenticatedMaxInFlight: cfg.UnauthenticatedMaxInFlight,
		DBReadTimeout:              time.Duration(cfg.DBReadTimeout),
		AllowedHosts:               cfg.AllowedHosts,
		ConsoleTrustedProxies:      cfg.Console.TrustedProxies,
		ConsoleSessionTTL:          time.Duration(cfg.Console.SessionTTL),
	}
}

// WorkerConfig is the worker the configuration describes.
func WorkerConfig(cfg config.Config) harvest.WorkerConfig {
	return harvest.WorkerConfig{
		TaskQueue:              cfg.TaskQueue,
		TaskAckWait:            time.Duration(cfg.TaskAckWait),
		ShutdownGrace:          time.Duration(cfg.ShutdownGrace),
		DisableEagerActivities: cfg.DisableEagerActivities,
		WorkflowCacheSize:      cfg.WorkflowCacheSize,
	}
}
