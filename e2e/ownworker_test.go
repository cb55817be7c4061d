package e2e

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/probe"
	"github.com/harvest-engine/harvest/internal/workerrt"
)

// TestTheREADMEWorkerRuns builds the README's "Writing a workflow"
// program (which docs/own-worker.md shows too), as it is written, in a
// module of its own, starts harvest dev (its example worker on the same
// task queue), runs the program with nothing but the URL harvest dev printed, starts
// its workflow through the API and sees it complete; then Ctrl-C stops
// the worker cleanly.
func TestTheREADMEWorkerRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a module and runs harvest dev")
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	readme, err := os.ReadFile(filepath.Join(root, "README.md"))
	require.NoError(t, err)
	program := goBlockAfter(t, string(readme), "## Writing a workflow")
	page, err := os.ReadFile(filepath.Join(root, "docs", "own-worker.md"))
	require.NoError(t, err)
	require.Equal(t, program, goBlockAfter(t, string(page), "## 1. A module with a worker"),
		"docs/own-worker.md shows the README's program, as it is")

	// The user's module, Harvest replaced by this repository.
	mod := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(mod, "main.go"), []byte(program), 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.mod"), []byte(fmt.Sprintf(
		"module example.com/orders\n\ngo 1.26\n\nrequire github.com/harvest-engine/harvest v0.0.0\n\nreplace github.com/harvest-engine/harvest => %s\n", root)), 0o644))
	sums, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(mod, "go.sum"), sums, 0o644))
	build := exec.Command("go", "build", "-mod=mod", "-o", "worker", ".")
	build.Dir = mod
	out, err := build.CombinedOutput()
	require.NoError(t, err, "the README's program builds: %s", out)

	// harvest dev, and the URL it prints.
	bin := buildHarvest(t)
	addr := freeAddr(t)
	stateDir := filepath.Join(t.TempDir(), "state")
	// With the example worker, on the same task queue: place_order's
	// tasks go only to the program, which registers it.
	dev := exec.Command(bin, "dev", "--addr", addr, "--state-dir", stateDir)
	dev.Env = devEnv()
	stdout, err := dev.StdoutPipe()
	require.NoError(t, err)
	devLog := &syncWriter{w: &bytes.Buffer{}}
	dev.Stderr = devLog
	require.NoError(t, dev.Start())
	t.Cleanup(func() {
		_ = dev.Process.Signal(syscall.SIGTERM)
		_ = dev.Wait()
	})
	exported := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "export HARVEST_NATS_URL="); ok {
				exported <- v
			}
		}
	}()
	var natsURL string
	select {
	case natsURL = <-exported:
	case <-time.After(60 * time.Second):
		t.Fatal("harvest dev printed no export HARVEST_NATS_URL= line within 60s")
	}
	written, err := os.ReadFile(filepath.Join(stateDir, "nats.url"))
	require.NoError(t, err)
	require.Equal(t, natsURL, strings.TrimSpace(string(written)), "the state dir's nats.url is the URL printed")

	// The worker, with nothing but the URL.
	worker := exec.Command(filepath.Join(mod, "worker"))
	worker.Env = append(devEnv(), "HARVEST_NATS_URL="+natsURL)
	workerLog := &syncWriter{w: &bytes.Buffer{}}
	worker.Stdout, worker.Stderr = workerLog, workerLog
	require.NoError(t, worker.Start())
	t.Cleanup(func() {
		if worker.ProcessState == nil {
			_ = worker.Process.Kill()
			_ = worker.Wait()
		}
		if t.Failed() {
			t.Logf("the worker's log:\n%s\nharvest dev's log:\n%s", workerLog.String(), devLog.String())
		}
	})
	probe.Until(t, 30*time.Second, "the worker to log that it started", func() bool {
		return strings.Contains(workerLog.String(), "worker started")
	})

	req, err := http.NewRequest(http.MethodPost, "http://"+addr+"/api/harvest/workflows/place_order/start",
		strings.NewReader(`{"input": {"order_id": "o-1", "items": 2}}`))
	require.NoError(t, err)
	req.Header.Set("Idempotency-Key", "order-1")
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	body, _ := io.ReadAll(resp.Body)
	_ = resp.Body.Close()
	require.Contains(t, []int{200, 201, 202}, resp.StatusCode, "%s", body)
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	require.NoError(t, json.Unmarshal(body, &started))
	var exec struct {
		Status    string     `json:"status"`
		CreatedAt time.Time  `json:"created_at"`
		ClosedAt  *time.Time `json:"closed_at"`
		Result    struct {
			OrderID     string `json:"order_id"`
			Reservation string `json:"reservation"`
		} `json:"result"`
	}
	t.Cleanup(func() {
		if t.Failed() {
			resp, err := http.Get("http://" + addr + "/api/harvest/executions/" + started.ExecutionID + "/history")
			if err == nil {
				h, _ := io.ReadAll(resp.Body)
				_ = resp.Body.Close()
				t.Logf("history: %s", h)
			}
		}
	})
	probe.Until(t, 60*time.Second, "place_order to complete", func() bool {
		resp, err := http.Get("http://" + addr + "/api/harvest/executions/" + started.ExecutionID)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return json.NewDecoder(resp.Body).Decode(&exec) == nil && exec.Status == "Completed"
	})
	require.Equal(t, "o-1", exec.Result.OrderID)
	require.True(t, strings.HasPrefix(exec.Result.Reservation, "rsv-2-"), exec.Result.Reservation)
	require.NotNil(t, exec.ClosedAt)
	require.Less(t, exec.ClosedAt.Sub(exec.CreatedAt), workerrt.UnknownTaskDelay,
		"no task went to the example worker first, to be handed back")

	// Ctrl-C.
	require.NoError(t, worker.Process.Signal(syscall.SIGINT))
	done := make(chan error, 1)
	go func() { done <- worker.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err, "the worker exits cleanly on Ctrl-C")
	case <-time.After(30 * time.Second):
		t.Fatal("the worker did not stop within 30s of Ctrl-C")
	}
}

// goBlockAfter is the first ```go block of doc after the line heading.
func goBlockAfter(t *testing.T, doc, heading string) string {
	t.Helper()
	_, rest, ok := strings.Cut(doc, "\n"+heading+"\n")
	require.True(t, ok, "no %q", heading)
	_, rest, ok = strings.Cut(rest, "\n```go\n")
	require.True(t, ok, "no go block after %q", heading)
	block, _, ok := strings.Cut(rest, "\n```\n")
	require.True(t, ok, "an unclosed go block after %q", heading)
	return block + "\n"
}

// syncWriter serialises writes to w.
type syncWriter struct {
	mu sync.Mutex
	w  *bytes.Buffer
}

func (s *syncWriter) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.Write(p)
}

func (s *syncWriter) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.w.String()
}
