package e2e

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/examples"
	"github.com/harvest-engine/harvest/internal/testing/probe"
)

func buildHarvest(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	out, err := exec.Command("go", "build", "-o", dir+string(filepath.Separator), "github.com/harvest-engine/harvest/cmd/harvest").CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return filepath.Join(dir, "harvest")
}

func freeAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer l.Close()
	return l.Addr().String()
}

// devEnv is the environment without the variables that would point
// harvest dev at servers of our own.
// writeDeclaredConfig writes, in dir, a configuration that declares the
// example workflows, so that an ingest process accepts their starts
// while no worker serves them (one killed, or not up yet), as a
// deployment's configuration would.
func writeDeclaredConfig(dir string) (string, error) {
	return writeDeclaredConfigWith(dir, nil)
}

// writeDeclaredConfigWith is writeDeclaredConfig with the settings of some
// workflows (workflows.<name>, as YAML flow values).
func writeDeclaredConfigWith(dir string, settings map[string]string) (string, error) {
	var b strings.Builder
	b.WriteString("workflows:\n")
	for _, name := range examples.Workflows() {
		fmt.Fprintf(&b, "  %s: %s\n", name, cmp.Or(settings[name], "{}"))
	}
	// And the settings of workflows that are no example (the fleet
	// worker's).
	for _, name := range slices.Sorted(maps.Keys(settings)) {
		if !slices.Contains(examples.Workflows(), name) {
			fmt.Fprintf(&b, "  %s: %s\n", name, settings[name])
		}
	}
	path := filepath.Join(dir, "declared.yaml")
	if err := os.WriteFile(path, []byte(b.String()), 0o644); err != nil {
		return "", fmt.Errorf("declared config: %w", err)
	}
	return path, nil
}

func devEnv(extra ...string) []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "HARVEST_") {
			continue
		}
		env = append(env, kv)
	}
	return append(env, extra...)
}

// TestHarvestDev runs the README's first command as a newcomer would: a
// private PostgreSQL, an embedded NATS, a keyed start and its retry, then
// SIGTERM.
func TestHarvestDev(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	bin := buildHarvest(t)
	addr := freeAddr(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	cmd := exec.Command(bin, "dev", "--addr", addr, "--state-dir", stateDir)
	cmd.Env = devEnv()
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	ready := make(chan struct{})
	var logs bytes.Buffer
	go func() {
		sc := bufio.NewScanner(stderr)
		for sc.Scan() {
			logs.WriteString(sc.Text() + "\n")
			if strings.Contains(sc.Text(), "harvest dev ready") {
				close(ready)
			}
		}
	}()
	select {
	case <-ready:
	case <-time.After(60 * time.Second):
		t.Fatalf("harvest dev did not log ready within 60s")
	}

	post := func() (int, map[string]any) {
		req, _ := http.NewRequest("POST", "http://"+addr+"/api/harvest/workflows/onboarding/start", strings.NewReader(`{"input": {"user_id": 42}}`))
		req.Header.Set("Idempotency-Key", "webhook-evt-abc123")
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var body map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&body))
		return resp.StatusCode, body
	}
	status, first := post()
	require.Equal(t, 201, status, first)
	require.Equal(t, true, first["started_fresh"])
	status, again := post()
	require.Equal(t, 200, status, again)
	require.Equal(t, first["execution_id"], again["execution_id"])
	require.Equal(t, true, again["deduplicated"])

	probe.Until(t, 30*time.Second, "the execution to complete", func() bool {
		resp, err := http.Get(fmt.Sprintf("http://%s/api/harvest/executions/%s", addr, first["execution_id"]))
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var exec map[string]any
		_ = json.NewDecoder(resp.Body).Decode(&exec)
		return exec["status"] == "Completed"
	})

	require.NoError(t, cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "harvest dev exits cleanly on SIGTERM; logs:\n%s", logs.String())
	case <-time.After(30 * time.Second):
		t.Fatalf("harvest dev did not stop within 30s of SIGTERM")
	}
	// PostgreSQL keeps its data in the state dir (as root too, under this
	// test's 0700 temp dir), and stopped with it: no live postmaster.pid.
	_, err = os.Stat(filepath.Join(stateDir, "postgres", "PG_VERSION"))
	require.NoError(t, err, "PostgreSQL's data is in the state dir")
	_, err = os.Stat(filepath.Join(stateDir, "postgres", "postmaster.pid"))
	require.True(t, os.IsNotExist(err), "postmaster.pid left behind")
}

func TestHarvestDevWithoutPostgresSaysWhatToInstall(t *testing.T) {
	if testing.Short() {
		t.Skip("builds harvest")
	}
	bin := buildHarvest(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, "dev", "--addr", freeAddr(t), "--state-dir", t.TempDir())
	cmd.Env = devEnv("HARVEST_PG_BIN=" + t.TempDir()) // a folder without PostgreSQL
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	err := cmd.Run()
	require.Error(t, err, "harvest dev must fail without PostgreSQL")
	lines := strings.Split(strings.TrimSpace(stderr.String()), "\n")
	last := lines[len(lines)-1]
	require.Contains(t, last, "install PostgreSQL")
	require.Contains(t, last, "HARVEST_DATABASE_URL")
}
