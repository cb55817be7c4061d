package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/probe"
)

// devProc is a harvest dev running as a process.
type devProc struct {
	cmd    *exec.Cmd
	logs   *devLog
	exited chan error // cmd.Wait's result
}

// startDev runs harvest dev with args in dir and waits until it is ready.
func startDev(t *testing.T, bin, dir string, args ...string) *devProc {
	t.Helper()
	return startDevEnv(t, bin, dir, devEnv(), args...)
}

// startDevEnv is startDev with the environment env.
func startDevEnv(t *testing.T, bin, dir string, env []string, args ...string) *devProc {
	t.Helper()
	cmd := exec.Command(bin, append([]string{"dev"}, args...)...)
	cmd.Dir, cmd.Env = dir, env
	d := &devProc{cmd: cmd, logs: &devLog{ready: make(chan struct{})}, exited: make(chan error, 1)}
	cmd.Stdout, cmd.Stderr = d.logs, d.logs
	require.NoError(t, cmd.Start())
	go func() { d.exited <- cmd.Wait() }()
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			_ = <-d.exited // killed: it exits with an error
		}
	})
	select {
	case <-d.logs.ready:
	case err := <-d.exited:
		t.Fatalf("harvest dev %v exited (%v) before it was ready; logs:\n%s", args, err, d.logs)
	case <-time.After(90 * time.Second):
		t.Fatalf("harvest dev %v did not log ready within 90s; logs:\n%s", args, d.logs)
	}
	return d
}

// stop sends SIGTERM and requires a clean exit.
func (d *devProc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, d.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case err := <-d.exited:
		require.NoError(t, err, "harvest dev exits cleanly on SIGTERM; logs:\n%s", d.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("harvest dev did not stop within 60s of SIGTERM; logs:\n%s", d.logs)
	}
}

// devFails runs a harvest dev that must fail within within, and returns
// its last line of output (the error).
func devFails(t *testing.T, bin string, within time.Duration, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), within)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, append([]string{"dev"}, args...)...)
	cmd.Env = devEnv()
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	err := cmd.Run()
	require.NoError(t, ctx.Err(), "harvest dev %v did not fail within %s; output:\n%s", args, within, out.String())
	var exit *exec.ExitError
	require.ErrorAs(t, err, &exit, "harvest dev %v must fail; output:\n%s", args, out.String())
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	return lines[len(lines)-1]
}

// TestHarvestDevTheFirstHour runs harvest dev as a newcomer would trip
// over it: from a folder without the repository's configuration, twice
// on one state dir, on a taken address or NATS port, with another shard
// count, and again after a restart.
func TestHarvestDevTheFirstHour(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	bin := buildHarvest(t)
	elsewhere := t.TempDir() // no configs/harvest.dev.yaml here
	stateDir := filepath.Join(t.TempDir(), "state")
	addr := freeAddr(t)
	dev := startDev(t, bin, elsewhere, "--addr", addr, "--state-dir", stateDir)

	// It says it read no configuration file, where it looked, and what that means.
	logs := dev.logs.String()
	require.Contains(t, logs, "level=WARN msg=\"no configuration file: "+filepath.Join(elsewhere, "configs", "harvest.dev.yaml")+" does not exist")
	require.Contains(t, logs, "no webhooks are configured (POST /hooks/{source} knows no source)")
	resp, err := http.Post("http://"+addr+"/hooks/stripe", "application/json", strings.NewReader(`{}`))
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusNotFound, resp.StatusCode, "no webhook sources")

	// An execution, to find again after a restart.
	resp, err = http.Post("http://"+addr+"/api/harvest/workflows/onboarding/start", "application/json", strings.NewReader(`{"input": {"user_id": 1}}`))
	require.NoError(t, err)
	var started struct {
		ExecutionID string `json:"execution_id"`
	}
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&started))
	require.NoError(t, resp.Body.Close())
	require.NotEmpty(t, started.ExecutionID)
	status := func(base string) string {
		resp, err := http.Get(base + "/api/harvest/executions/" + started.ExecutionID)
		if err != nil {
			return err.Error()
		}
		defer resp.Body.Close()
		var e struct {
			Status string `json:"status"`
		}
		_ = json.NewDecoder(resp.Body).Decode(&e)
		return e.Status
	}
	probe.Until(t, 30*time.Second, "the execution to complete", func() bool { return status("http://"+addr) == "Completed" })

	// A second harvest dev on the state dir in use.
	line := devFails(t, bin, 20*time.Second, "--addr", freeAddr(t), "--state-dir", stateDir)
	require.Equal(t, fmt.Sprintf("harvest: state dir %s is in use by another harvest dev (pid %d): stop that harvest dev first, or pass another --state-dir",
		stateDir, dev.cmd.Process.Pid), line)

	// Its address, or its NATS port, taken: nothing starts.
	other := filepath.Join(t.TempDir(), "other")
	line = devFails(t, bin, 20*time.Second, "--addr", addr, "--state-dir", other)
	require.Equal(t, "harvest: the HTTP API cannot listen on "+addr+": bind: address already in use; "+
		"another process (another harvest dev?) listens there: stop it, or pass another --addr", line)
	natsPort := regexp.MustCompile(`nats=nats://harvest:xxxxx@127\.0\.0\.1:(\d+)`).FindStringSubmatch(dev.logs.String())
	require.NotNil(t, natsPort, dev.logs.String())
	line = devFails(t, bin, 20*time.Second, "--addr", freeAddr(t), "--nats-port", natsPort[1], "--state-dir", other)
	require.Equal(t, "harvest: the embedded NATS server cannot listen on 127.0.0.1:"+natsPort[1]+": bind: address already in use; "+
		"another process (another harvest dev?) listens there: stop it, or pass another --nats-port", line)
	left, err := os.ReadDir(other)
	require.NoError(t, err)
	require.Len(t, left, 1, "neither NATS nor PostgreSQL started in %s: %v", other, left)

	dev.stop(t)
	_, err = os.Stat(filepath.Join(stateDir, "postgres", "PG_VERSION"))
	require.NoError(t, err, "PostgreSQL's data is in the state dir")

	// Another shard count than the state dir's.
	line = devFails(t, bin, 60*time.Second, "--addr", freeAddr(t), "--state-dir", stateDir, "--shards", "4")
	require.Equal(t, "harvest: state dir "+stateDir+" was created with 1 shard, which it keeps for life; the stack is configured with 4 shards: "+
		"run harvest dev with --shards 1, or without --shards (and HARVEST_SHARDS, and the config file's shards); or pass a fresh --state-dir for 4 shards", line)

	// Again, logging JSON: the execution is still there.
	addr = freeAddr(t)
	dev = startDev(t, bin, elsewhere, "--addr", addr, "--state-dir", stateDir, "--log-format", "json")
	require.Equal(t, "Completed", status("http://"+addr))
	dev.stop(t)
	sc := bufio.NewScanner(strings.NewReader(dev.logs.String()))
	n, exports := 0, 0
	for sc.Scan() {
		if strings.HasPrefix(sc.Text(), "export HARVEST_NATS_URL=") {
			// The one line on standard output, for the user's shell.
			exports++
			continue
		}
		var obj map[string]any
		require.NoError(t, json.Unmarshal(sc.Bytes(), &obj), "not JSON: %s", sc.Text())
		n++
	}
	require.Equal(t, 1, exports, "harvest dev prints the NATS URL for workers of your own")
	require.Greater(t, n, 3)
	require.Contains(t, dev.logs.String(), `"msg":"no configuration file: `)
}

// documentedFlags reads docs/configuration.md's flags table: the flags
// each command takes.
func documentedFlags(t *testing.T) map[string][]string {
	t.Helper()
	data, err := os.ReadFile("../docs/configuration.md")
	require.NoError(t, err)
	takes := map[string][]string{}
	row := regexp.MustCompile("(?m)^\\| `(--[a-z-]+)` \\| [^|]+ \\| [^|]+ \\| ([^|]+) \\|$")
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		for _, who := range []string{"ingest", "scheduler", "worker"} {
			if strings.Contains(m[2], "`"+who+"`") || strings.Contains(m[2], "every process") {
				takes[who] = append(takes[who], m[1])
			}
		}
	}
	require.NotEmpty(t, takes)
	return takes
}

// TestTheServicesShareTheirFlags: ingest, scheduler and worker take the
// flags docs/configuration.md lists for them, say at start-up which
// configuration file they read (or that they read none), log JSON on
// --log-format json, and refuse a bad log format naming the key.
func TestTheServicesShareTheirFlags(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the services")
	}
	dir := buildServices(t)
	takes := documentedFlags(t)
	cfgFile := filepath.Join(t.TempDir(), "svc.yaml")
	// NATS where nothing listens: each service logs its start, then waits.
	require.NoError(t, os.WriteFile(cfgFile, []byte(fmt.Sprintf("nats_url: nats://%s\n", freeAddr(t))), 0o600))
	for _, name := range []string{"ingest", "scheduler", "worker"} {
		t.Run(name, func(t *testing.T) {
			bin := filepath.Join(dir, name)
			help, err := exec.Command(bin, "--help").CombinedOutput()
			require.NoError(t, err, "%s", help)
			var got []string
			for _, m := range regexp.MustCompile(`(?m)^\s+(?:-\w, )?(--[a-z-]+)`).FindAllStringSubmatch(string(help), -1) {
				if m[1] != "--help" {
					got = append(got, m[1])
				}
			}
			want := append([]string(nil), takes[name]...)
			sort.Strings(got)
			sort.Strings(want)
			require.Equal(t, want, got, "%s --help:\n%s", name, help)

			firstLine := func(args ...string) map[string]any {
				t.Helper()
				cmd := exec.Command(bin, args...)
				cmd.Env = devEnv()
				stderr, err := cmd.StderrPipe()
				require.NoError(t, err)
				require.NoError(t, cmd.Start())
				defer func() {
					_ = cmd.Process.Signal(syscall.SIGTERM)
					_ = cmd.Wait()
				}()
				line, err := bufio.NewReader(stderr).ReadString('\n')
				require.NoError(t, err)
				var obj map[string]any
				require.NoError(t, json.Unmarshal([]byte(line), &obj), "not JSON: %s", line)
				return obj
			}
			obj := firstLine("--config", cfgFile, "--log-format", "json")
			require.Equal(t, "configuration file read", obj["msg"])
			require.Equal(t, cfgFile, obj["config_file"])
			require.Equal(t, "--config", obj["named_by"])
			require.Equal(t, name, obj["service"])
			obj = firstLine("--log-format", "json", "--nats-url", "nats://"+freeAddr(t))
			require.Equal(t, "no configuration file: neither --config nor HARVEST_CONFIG names one; the defaults and HARVEST_* variables apply", obj["msg"])

			cmd := exec.Command(bin, "--log-format", "xml")
			cmd.Env = devEnv()
			out, err := cmd.CombinedOutput()
			require.Error(t, err)
			require.Equal(t, name+": config: log_format \"xml\": want text or json\n", string(out))
		})
	}
}
