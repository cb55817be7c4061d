package service_test

import (
	"bytes"
	"context"
	"log/slog"
	"os"
	"path/filepath"
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
