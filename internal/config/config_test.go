package config_test

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

func TestLoadWebhooksAndDurations(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`
shards: 8
outcome_wait: 2s
outcome_ttl: 1h
webhooks:
  - name: stripe
    kind: stripe
    secrets: [whsec_a, whsec_b]
    tolerance: 3m
    rules:
      - event: payment_intent.succeeded
        workflow: charge
        input_pointer: /data/object
`), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Equal(t, 8, c.Shards)
	require.Equal(t, 2*time.Second, time.Duration(c.OutcomeWait))
	require.Equal(t, time.Hour, time.Duration(c.OutcomeTTL))
	require.Len(t, c.Webhooks, 1)
	require.Equal(t, 3*time.Minute, c.Webhooks[0].Tolerance)
	require.Equal(t, []string{"whsec_a", "whsec_b"}, c.Webhooks[0].Secrets)
	require.Equal(t, "charge", c.Webhooks[0].Rules[0].Workflow)

	require.NoError(t, os.WriteFile(path, []byte("shardz: 8\n"), 0o600))
	_, err = config.Load(path)
	require.ErrorContains(t, err, "shardz", "unknown fields are errors")
}

func TestOutcomeTTLFromTheEnvironment(t *testing.T) {
	t.Setenv("HARVEST_OUTCOME_TTL", "30m")
	c, err := config.Load("")
	require.NoError(t, err)
	require.Equal(t, 30*time.Minute, time.Duration(c.OutcomeTTL))

	t.Setenv("HARVEST_OUTCOME_TTL", "-1m")
	_, err = config.Load("")
	require.ErrorContains(t, err, "outcome_ttl")
}

func TestTheDevConfigLoads(t *testing.T) {
	_, err := config.Load("../../configs/harvest.dev.yaml")
	require.NoError(t, err)
}

// TestTheDevBindingsConfigIsTheDevConfigAndABinding keeps the
// configuration docs/webhooks.md runs its binding example with in step
// with the dev configuration it repeats.
func TestTheDevBindingsConfigIsTheDevConfigAndABinding(t *testing.T) {
	dev, err := config.LoadEnv("../../configs/harvest.dev.yaml", func(string) string { return "" })
	require.NoError(t, err)
	require.Empty(t, dev.Bindings)
	withBinding, err := config.LoadEnv("../../configs/harvest.dev-bindings.yaml", func(string) string { return "" })
	require.NoError(t, err)
	require.Len(t, withBinding.Bindings, 1)
	require.Equal(t, "orders", withBinding.Bindings[0].Name)
	withBinding.Bindings = nil
	require.Equal(t, dev, withBinding, "harvest.dev-bindings.yaml is harvest.dev.yaml and its bindings")
}

func TestWorkerSettings(t *testing.T) {
	path := filepath.Join(t.TempDir(), "w.yaml")
	require.NoError(t, os.WriteFile(path, []byte("task_ack_wait: 3s\nshutdown_grace: 45s\ndisable_eager_activities: true\n"), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Equal(t, 3*time.Second, time.Duration(c.TaskAckWait))
	require.Equal(t, 45*time.Second, time.Duration(c.ShutdownGrace))
	require.True(t, c.DisableEagerActivities)

	t.Setenv("HARVEST_SHUTDOWN_GRACE", "10s")
	t.Setenv("HARVEST_DISABLE_EAGER_ACTIVITIES", "false")
	c, err = config.Load(path)
	require.NoError(t, err)
	require.Equal(t, 10*time.Second, time.Duration(c.ShutdownGrace))
	require.False(t, c.DisableEagerActivities)

	t.Setenv("HARVEST_SHUTDOWN_GRACE", "-1s")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "shutdown_grace")
	t.Setenv("HARVEST_SHUTDOWN_GRACE", "")
	t.Setenv("HARVEST_TASK_ACK_WAIT", "500ms")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "task_ack_wait")
	t.Setenv("HARVEST_TASK_ACK_WAIT", "")
	t.Setenv("HARVEST_DISABLE_EAGER_ACTIVITIES", "maybe")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "HARVEST_DISABLE_EAGER_ACTIVITIES")
}

func TestTheWorkerConfigLoads(t *testing.T) {
	c, err := config.Load("../../configs/worker.yaml")
	require.NoError(t, err)
	require.Equal(t, 5*time.Second, time.Duration(c.TaskAckWait))
	require.Equal(t, 30*time.Second, time.Duration(c.ShutdownGrace))
}

// TestLogFormat: log_format text (the default) writes logfmt, json one
// JSON object a line; anything else is an error naming the key, from the
// file and from HARVEST_LOG_FORMAT alike.
func TestLogFormat(t *testing.T) {
	var buf bytes.Buffer
	c, err := config.Load("")
	require.NoError(t, err)
	c.Logger(&buf).Info("hello", "shard", 3)
	require.Regexp(t, `^time=\S+ level=INFO msg=hello shard=3\n$`, buf.String())

	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("log_format: json\nlog_level: debug\n"), 0o600))
	c, err = config.Load(path)
	require.NoError(t, err)
	buf.Reset()
	c.Logger(&buf).Debug("hello", "shard", 3)
	var line map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &line), buf.String())
	require.Equal(t, "DEBUG", line["level"])
	require.Equal(t, "hello", line["msg"])
	require.InDelta(t, 3, line["shard"], 0)

	t.Setenv("HARVEST_LOG_FORMAT", "text")
	c, err = config.Load(path)
	require.NoError(t, err)
	require.Equal(t, config.LogFormatText, c.LogFormat, "the variable overrides the file")

	require.NoError(t, os.WriteFile(path, []byte("log_format: logfmt\n"), 0o600))
	t.Setenv("HARVEST_LOG_FORMAT", "")
	_, err = config.Load(path)
	require.EqualError(t, err, `config: log_format "logfmt": want text or json`)
	t.Setenv("HARVEST_LOG_FORMAT", "JSON")
	_, err = config.Load("")
	require.EqualError(t, err, `config: log_format "JSON": want text or json`)
}

// TestLoadEnvReadsThroughGetenv: LoadEnv takes the variables from its
// getenv, as the commands' flags hand them in.
func TestLoadEnvReadsThroughGetenv(t *testing.T) {
	t.Setenv("HARVEST_SHARDS", "4")
	c, err := config.LoadEnv("", func(name string) string {
		if name == "HARVEST_SHARDS" {
			return "2"
		}
		return os.Getenv(name)
	})
	require.NoError(t, err)
	require.Equal(t, 2, c.Shards)
}

func TestStreamMaxBytes(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s.yaml")
	require.NoError(t, os.WriteFile(path, []byte("nats_command_stream_max_bytes: 8388608\nnats_task_stream_max_bytes: 16777216\n"), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.EqualValues(t, 8<<20, c.NATSCommandStreamMaxBytes)
	require.EqualValues(t, 16<<20, c.NATSTaskStreamMaxBytes)

	t.Setenv("HARVEST_NATS_COMMAND_STREAM_MAX_BYTES", "2147483648")
	t.Setenv("HARVEST_NATS_TASK_STREAM_MAX_BYTES", "4294967296")
	c, err = config.Load(path)
	require.NoError(t, err)
	require.EqualValues(t, 2<<30, c.NATSCommandStreamMaxBytes)
	require.EqualValues(t, 4<<30, c.NATSTaskStreamMaxBytes)

	// Less than 4 MiB could not hold the largest command NATS carries.
	t.Setenv("HARVEST_NATS_COMMAND_STREAM_MAX_BYTES", "1048576")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "nats_command_stream_max_bytes 1048576: want at least 4194304")
	t.Setenv("HARVEST_NATS_COMMAND_STREAM_MAX_BYTES", "")
	t.Setenv("HARVEST_NATS_TASK_STREAM_MAX_BYTES", "-1")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "nats_task_stream_max_bytes -1")
	t.Setenv("HARVEST_NATS_TASK_STREAM_MAX_BYTES", "1GiB")
	_, err = config.Load(path)
	require.ErrorContains(t, err, "HARVEST_NATS_TASK_STREAM_MAX_BYTES")
}

// The history_* keys and variables set the scheduler's history limits; a
// bad one is refused at load, naming it: a negative number, a threshold
// above its hard limit (the defaults counted).
func TestHistoryLimits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte("history_max_events: 200\nhistory_warn_events: 100\nhistory_max_bytes: 1048576\n"), 0o600))
	t.Setenv("HARVEST_HISTORY_SUGGEST_BYTES", "65536")
	c, err := config.Load(path)
	require.NoError(t, err)
	l := c.HistoryLimits()
	require.Equal(t, 200, l.MaxEvents)
	require.Equal(t, 100, l.WarnEvents)
	require.EqualValues(t, 1<<20, l.MaxBytes)
	require.EqualValues(t, 65536, l.SuggestBytes)
	d := l.WithDefaults()
	require.Equal(t, 200, d.SuggestEvents, "an unset threshold is its default, capped at the hard limit")
	require.EqualValues(t, 1<<20, d.WarnBytes)

	t.Setenv("HARVEST_HISTORY_SUGGEST_BYTES", "")
	for _, bad := range []struct{ yaml, want string }{
		{"history_max_events: -1\n", "history_max_events -1: want a positive number"},
		{"history_warn_bytes: -5\n", "history_warn_bytes -5: want a positive number"},
		{"history_warn_events: 60000\n", "history_warn_events 60000 is above history_max_events 50000"},
		{"history_max_events: 100\nhistory_suggest_events: 101\n", "history_suggest_events 101 is above history_max_events 100"},
		{"history_max_bytes: 1000\nhistory_warn_bytes: 2000\n", "history_warn_bytes 2000 is above history_max_bytes 1000"},
		{"history_suggest_bytes: 104857600\n", "history_suggest_bytes 104857600 is above history_max_bytes 52428800"},
	} {
		require.NoError(t, os.WriteFile(path, []byte(bad.yaml), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, bad.want, bad.yaml)
	}
	t.Setenv("HARVEST_HISTORY_MAX_BYTES", "lots")
	_, err = config.Load("")
	require.ErrorContains(t, err, "HARVEST_HISTORY_MAX_BYTES")
}
