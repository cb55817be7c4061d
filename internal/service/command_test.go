package service_test

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

func TestCommandLoadsTheConfigAndRunsOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.yaml")
	require.NoError(t, os.WriteFile(path, []byte("task_queue: payments\n"), 0o600))
	var got config.Config
	calls := 0
	cmd := service.Command("svc", "a service", func(ctx context.Context, cfg config.Config, log *slog.Logger) error {
		calls++
		got = cfg
		require.NotNil(t, log)
		require.NoError(t, ctx.Err())
		return nil
	})
	var stderr bytes.Buffer
	require.Equal(t, 0, service.Exit(cmd, []string{"--config", path}, &stderr))
	require.Equal(t, 1, calls)
	require.Equal(t, "payments", got.TaskQueue)
	require.Empty(t, stderr.String())
}

func TestCommandFailuresBecomeExitCodeOne(t *testing.T) {
	run := func(context.Context, config.Config, *slog.Logger) error { return context.Canceled }
	for name, args := range map[string][]string{
		"run fails":      nil,
		"unknown flag":   {"--nope"},
		"missing config": {"--config", filepath.Join(t.TempDir(), "absent.yaml")},
		"stray argument": {"extra"},
	} {
		t.Run(name, func(t *testing.T) {
			var stderr bytes.Buffer
			require.Equal(t, 1, service.Exit(service.Command("svc", "a service", run), args, &stderr))
			require.Contains(t, stderr.String(), "svc: ")
		})
	}
}

// runCommand runs a service command that returns at once, and returns the
// configuration it ran with, its logs and its exit code.
func runCommand(t *testing.T, flags []service.Flag, args ...string) (config.Config, string, int) {
	t.Helper()
	var got config.Config
	cmd := service.Command("svc", "a service", func(_ context.Context, cfg config.Config, log *slog.Logger) error {
		got = cfg
		log.Info("running")
		return nil
	}, flags...)
	var logs, stderr bytes.Buffer
	cmd.SetErr(&logs)
	code := service.Exit(cmd, args, &stderr)
	return got, logs.String() + stderr.String(), code
}

// TestCommandSaysWhichConfigFileItRead: a service logs the configuration
// file it read, and what named it, or that it read none and where it
// looked.
func TestCommandSaysWhichConfigFileItRead(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.yaml")
	require.NoError(t, os.WriteFile(path, []byte("task_queue: payments\n"), 0o600))
	t.Setenv(service.EnvConfig, "")

	_, logs, code := runCommand(t, nil)
	require.Equal(t, 0, code, logs)
	require.Contains(t, logs, `level=INFO msg="no configuration file: neither --config nor HARVEST_CONFIG names one; the defaults and HARVEST_* variables apply" service=svc`)

	_, logs, code = runCommand(t, nil, "--config", path)
	require.Equal(t, 0, code, logs)
	require.Contains(t, logs, `level=INFO msg="configuration file read" service=svc config_file=`+path+` named_by=--config`)

	t.Setenv(service.EnvConfig, path)
	cfg, logs, code := runCommand(t, nil)
	require.Equal(t, 0, code, logs)
	require.Equal(t, "payments", cfg.TaskQueue)
	require.Contains(t, logs, `config_file=`+path+` named_by=HARVEST_CONFIG`)

	t.Setenv(service.EnvConfig, filepath.Join(t.TempDir(), "absent.yaml"))
	_, logs, code = runCommand(t, nil)
	require.Equal(t, 1, code)
	require.Contains(t, logs, "svc: config file ")
	require.Contains(t, logs, "absent.yaml (HARVEST_CONFIG)")
}

// TestLogFormatFlagAndVariable: --log-format json, or HARVEST_LOG_FORMAT,
// makes every line of a service's log a JSON object; a bad value fails
// the command naming the key.
func TestLogFormatFlagAndVariable(t *testing.T) {
	t.Setenv(service.EnvConfig, "")
	requireJSONLines := func(logs string) {
		t.Helper()
		lines := strings.Split(strings.TrimSpace(logs), "\n")
		require.Len(t, lines, 2, logs)
		for _, line := range lines {
			var obj map[string]any
			require.NoError(t, json.Unmarshal([]byte(line), &obj), line)
			require.Equal(t, "svc", obj["service"])
		}
	}
	_, logs, code := runCommand(t, nil, "--log-format", "json")
	require.Equal(t, 0, code, logs)
	requireJSONLines(logs)

	t.Setenv("HARVEST_LOG_FORMAT", "json")
	_, logs, code = runCommand(t, nil)
	require.Equal(t, 0, code, logs)
	requireJSONLines(logs)

	_, logs, code = runCommand(t, nil, "--log-format", "text")
	require.Equal(t, 0, code, logs)
	require.Contains(t, logs, "level=INFO msg=running service=svc", "the flag overrides the variable")

	_, logs, code = runCommand(t, nil, "--log-format", "yaml")
	require.Equal(t, 1, code)
	require.Equal(t, "svc: config: log_format \"yaml\": want text or json\n", logs)
}

// TestFlagsOverrideTheVariableOverTheFile: a configuration flag stands in
// for its variable: given, it wins over the variable, which wins over the
// file.
func TestFlagsOverrideTheVariableOverTheFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "svc.yaml")
	require.NoError(t, os.WriteFile(path, []byte("shards: 2\nhttp_addr: 127.0.0.1:1\nnats_url: nats://file:4222\n"), 0o600))
	t.Setenv(service.EnvConfig, path)
	all := []service.Flag{service.FlagAddr, service.FlagAdminAddr, service.FlagDatabaseURL, service.FlagShards, service.FlagTaskQueue}

	cfg, logs, code := runCommand(t, all)
	require.Equal(t, 0, code, logs)
	require.Equal(t, 2, cfg.Shards)
	require.Equal(t, "127.0.0.1:1", cfg.HTTPAddr)

	t.Setenv("HARVEST_SHARDS", "3")
	t.Setenv("HARVEST_NATS_URL", "nats://env:4222")
	cfg, logs, code = runCommand(t, all)
	require.Equal(t, 0, code, logs)
	require.Equal(t, 3, cfg.Shards)
	require.Equal(t, "nats://env:4222", cfg.NATSURL)

	cfg, logs, code = runCommand(t, all, "--shards", "4", "--nats-url", "nats://flag:4222", "--addr", "127.0.0.1:2",
		"--admin-addr", "127.0.0.1:3", "--database-url", "postgres://flag/db", "--task-queue", "payments", "--log-level", "debug")
	require.Equal(t, 0, code, logs)
	require.Equal(t, 4, cfg.Shards)
	require.Equal(t, "nats://flag:4222", cfg.NATSURL)
	require.Equal(t, "127.0.0.1:2", cfg.HTTPAddr)
	require.Equal(t, "127.0.0.1:3", cfg.AdminAddr)
	require.Equal(t, "postgres://flag/db", cfg.DatabaseURL)
	require.Equal(t, "payments", cfg.TaskQueue)
	require.Equal(t, "debug", cfg.LogLevel)

	_, logs, code = runCommand(t, all, "--shards", "-1")
	require.Equal(t, 1, code)
	require.Contains(t, logs, "config: shards -1")
	_, logs, code = runCommand(t, nil, "--shards", "4")
	require.Equal(t, 1, code, "a service takes only its own flags")
	require.Contains(t, logs, "unknown flag: --shards")
}
