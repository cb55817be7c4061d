package ingest

import (
	"log/slog"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/broker"
	"github.com/harvest-engine/harvest/internal/webhook"
)

// validConfig passes Validate; its Topology and NC are never used.
func validConfig() Config {
	return Config{Topology: &broker.Topology{}, NC: &nats.Conn{}}
}

func testHook(name string) webhook.Endpoint {
	return webhook.Endpoint{
		Source: webhook.Source{Name: name, Kind: webhook.KindHMAC, Secrets: []string{"s"}, Header: "X-Signature"},
		Rules:  []webhook.Rule{{Event: "order.created", Workflow: "fulfil"}},
	}
}

func TestConfigValidateNamesTheBadField(t *testing.T) {
	require.NoError(t, validConfig().Validate())
	for _, c := range []struct {
		name  string
		edit  func(*Config)
		names string
	}{
		{"no topology", func(c *Config) { c.Topology = nil }, "Topology"},
		{"no connection", func(c *Config) { c.NC = nil }, "NC"},
		{"negative outcome wait", func(c *Config) { c.OutcomeWait = -time.Second }, "OutcomeWait -1s"},
		{"negative body limit", func(c *Config) { c.MaxBodyBytes = -1 }, "MaxBodyBytes -1"},
		{"bad webhook", func(c *Config) { c.Webhooks = []webhook.Endpoint{{Source: webhook.Source{Name: "shop"}}} }, "shop"},
		{"webhook twice", func(c *Config) { c.Webhooks = []webhook.Endpoint{testHook("shop"), testHook("shop")} }, `webhook source "shop" is declared twice`},
		{"bad fingerprint mode", func(c *Config) { c.IdempotencyFingerprint = "strict" }, `idempotency_fingerprint "strict"`},
		{"bad fingerprint mode of a workflow", func(c *Config) { c.FingerprintByWorkflow = map[string]string{"charge": "strict"} }, `(workflow "charge")`},
	} {
		cfg := validConfig()
		c.edit(&cfg)
		err := cfg.Validate()
		require.ErrorContains(t, err, "ingest config: ", c.name)
		require.ErrorContains(t, err, c.names, c.name)
		_, err = New(cfg)
		require.Error(t, err, "New checks the config too: %s", c.name)
	}
	cfg := validConfig()
	cfg.Webhooks = []webhook.Endpoint{testHook("shop"), testHook("crm")}
	cfg.IdempotencyFingerprint, cfg.FingerprintByWorkflow = FingerprintIgnore, map[string]string{"charge": FingerprintReject}
	require.NoError(t, cfg.Validate())
}

func TestConfigDefaults(t *testing.T) {
	got := validConfig().withDefaults()
	require.Equal(t, DefaultOutcomeWait, got.OutcomeWait)
	require.Equal(t, int64(DefaultMaxBodyBytes), got.MaxBodyBytes)
	require.Equal(t, DefaultPublishTimeout, got.PublishTimeout)
	require.Equal(t, DefaultMaxStartDelay, got.MaxStartDelay)
	require.Equal(t, DefaultShardFailingAfter, got.ShardFailingAfter)
	require.NotNil(t, got.Logger)
	require.NotNil(t, got.Metrics)

	set := validConfig()
	set.OutcomeWait, set.MaxBodyBytes, set.Logger = time.Second, 10, slog.Default()
	got = set.withDefaults()
	require.Equal(t, time.Second, got.OutcomeWait)
	require.Equal(t, int64(10), got.MaxBodyBytes)
	require.Same(t, slog.Default(), got.Logger)
}

func TestFingerprintModeByWorkflow(t *testing.T) {
	cfg := Config{IdempotencyFingerprint: FingerprintReject, FingerprintByWorkflow: map[string]string{"charge": FingerprintIgnore}}
	require.True(t, cfg.rejectsFingerprintMismatch("onboarding"))
	require.False(t, cfg.rejectsFingerprintMismatch("charge"))
	cfg = Config{FingerprintByWorkflow: map[string]string{"charge": FingerprintReject}}
	require.False(t, cfg.rejectsFingerprintMismatch("onboarding"), "ignore is the default")
	require.True(t, cfg.rejectsFingerprintMismatch("charge"))
}
