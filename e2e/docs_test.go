package e2e

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docPages are the pages whose shell examples TestTheDocsExamplesRun
// runs, in the order a reader meets them: the README, then its list "The
// whole contract", then the rest. Every page of docs/ must be here.
var docPages = []string{
	"README.md",
	"docs/idempotency.md",
	"docs/start-policies.md",
	"docs/signals.md",
	"docs/cancellation.md",
	"docs/reset.md",
	"docs/batches.md",
	"docs/search-attributes.md",
	"docs/children.md",
	"docs/own-worker.md",
	"docs/determinism.md",
	"docs/versioning.md",
	"docs/long-workflows.md",
	"docs/coming-from-temporal.md",
	"docs/activities.md",
	"docs/testing.md",
	"docs/schedules.md",
	"docs/webhooks.md",
	"docs/arcflow.md",
	"docs/configuration.md",
	"docs/deploy.md",
	"docs/operations.md",
	"docs/metrics.md",
	"docs/tracing.md",
	"docs/security.md",
	"docs/architecture.md",
	"docs/reliability.md",
	"docs/console.md",
	"docs/benchmarks.md",
}

// docsPages, when set, runs only these pages' examples (comma-separated),
// for a writer trying a page.
var docsPages = flag.String("docs.pages", "", "run only these pages' examples, e.g. README.md,docs/signals.md")

// TestTheDocsExamplesRun follows the README and docs/*.md as a reader
// does: it builds harvest, starts `harvest dev` as a process on a fresh
// state dir, and runs every page's ```sh blocks in page order, each page
// in one sh session (so a variable one block sets is there for the next),
// comparing what each prints with what the page says. The convention:
//
//   - Every ```sh block runs, unless a marker on the line before it says
//     otherwise: <!-- doc-test: skip: why --> (never run; the reason is
//     required), <!-- doc-test: needs nats --> (run when the nats CLI is
//     on PATH), <!-- doc-test: restart --> (the block is one `harvest dev`
//     command: the running stack is stopped with SIGINT, as Ctrl-C does,
//     and started again with the block's variables and flags on the same
//     state dir). A block in another shell language, or a command in a
//     bare fence, fails the test: no example escapes it unseen.
//   - A comment "# → " after a command states what the commands since
//     the previous one answer: "# → 201" (every HTTP call answers 201),
//     "# → 200 {"status": "Completed"}" (and the last JSON printed has
//     these members), "# → exit 1: harvest: …" (the last command's exit
//     status and last line), or "# → text" (the last line printed).
//   - The block's last commands are compared with the output fences (```
//     or ```json) right after the block: the same status lines (with the
//     headers shown), JSON values and lines of text, in order. An object
//     has exactly the members shown, unless a bare … stands among them
//     for the others; an array's final … stands for more elements. A
//     value that varies (an id, a time) is written with …: "…" alone is
//     any value, and "01a2370e-fdd2-…" any token that starts with that
//     shape (a digit or a-f for any hex digit). HTTP calls whose status
//     is not printed (no -i) must answer 2xx.
//   - An output fence with <!-- doc-test: again --> before it runs the
//     sh block before it once more ("the same request again").
//   - Commands that changed nothing (reads, and keyed requests, which
//     Harvest answers alike however often they are sent) are run again
//     until they print what the page says, for up to 30 s, since the
//     workflows run in the background; any other command runs once.
//
// localhost:8080 becomes the test stack's address, `go run ./cmd/harvest`
// the binary built here, and NATS_URL and HARVEST_ADDR point the nats CLI
// and harvest at the stack. docs/security.md's blocks need tokens this
// stack does not have: TestTheSecurityExamplesRun (security_docs_test.go)
// runs them, so they are marked skip here.
func TestTheDocsExamplesRun(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs harvest dev")
	}
	realCurl, err := exec.LookPath("curl")
	if err != nil {
		t.Skip("no curl on this machine")
	}
	for _, tool := range []string{"sh", "jq", "openssl"} {
		_, err := exec.LookPath(tool)
		require.NoError(t, err, "the docs' examples use %s", tool)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	pages, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	require.NoError(t, err)
	for _, p := range pages {
		rel, _ := filepath.Rel(root, p)
		require.Contains(t, docPages, rel, "a page of docs/ that TestTheDocsExamplesRun does not follow: add it to docPages")
	}

	var all [][]docBlock
	for _, page := range docPages {
		doc, err := os.ReadFile(filepath.Join(root, page))
		require.NoError(t, err)
		blocks, err := parseDoc(page, doc)
		require.NoError(t, err)
		all = append(all, blocks)
	}

	bin := buildHarvest(t)
	tools := t.TempDir()
	require.NoError(t, os.Symlink(bin, filepath.Join(tools, "harvest")))
	calls := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(tools, "curl"), []byte(curlRecorder(realCurl)), 0o755))
	natsCLI, _ := exec.LookPath("nats")

	s := &docStack{t: t, bin: bin, root: root, stateDir: filepath.Join(t.TempDir(), "state")}
	s.start(nil, nil)
	t.Cleanup(s.kill)

	ran, skipped := 0, 0
	for i, page := range docPages {
		if len(all[i]) == 0 || (*docsPages != "" && !slices.Contains(strings.Split(*docsPages, ","), page)) {
			continue
		}
		sh := newDocShell(t, t.TempDir(), calls, []string{
			"PATH=" + tools + string(os.PathListSeparator) + os.Getenv("PATH"),
			"HARVEST_ADDR=http://" + s.addr,
			"NATS_URL=" + s.natsURL(),
			"HOME=" + t.TempDir(),
		})
		for _, b := range all[i] {
			switch {
			case b.marker == "skip":
				t.Logf("%s: not run: %s", b.where(), b.reason)
				skipped++
				continue
			case b.marker == "needs nats" && natsCLI == "":
				t.Logf("%s: not run: the nats CLI is not on PATH (go install github.com/nats-io/natscli/nats@v0.5.0)", b.where())
				skipped++
				continue
			case b.marker == "restart":
				env, args, err := restartCommand(b.text)
				require.NoError(t, err, b.where())
				t.Logf("%s: restarting harvest dev %s", b.where(), strings.Join(append(env, args...), " "))
				s.stop()
				s.start(env, args)
				ran++
				continue
			}
			segs, err := splitSegments(b)
			require.NoError(t, err)
			for _, seg := range segs {
				runSegment(t, sh, s, b, seg)
			}
			ran++
		}
		sh.close()
	}
	t.Logf("%d blocks run, %d not run", ran, skipped)
	if *docsPages == "" {
		require.Greater(t, ran, 50, "the pages' examples were found")
	}
	s.stop()
}

// runSegment runs one segment, again while it is safe to and it does not
// print what the page says, and fails the test if it never does.
func runSegment(t *testing.T, sh *docShell, s *docStack, b docBlock, seg segment) {
	t.Helper()
	script := rewriteForStack(seg.script, s.addr)
	deadline := time.Now().Add(30 * time.Second)
	for attempt := 1; ; attempt++ {
		res := sh.run(script)
		err := checkSegment(seg, res)
		if err == nil {
			if attempt > 1 {
				t.Logf("%s: as the page says after %d runs", b.where(), attempt)
			}
			return
		}
		if !res.repeatable() || time.Now().After(deadline) {
			t.Fatalf("%s: %v\n--- commands\n%s\n--- stdout\n%s\n--- stderr\n%s\n--- exit status %d, HTTP %v\n--- harvest dev's last log lines\n%s",
				b.where(), err, strings.TrimSpace(seg.script), res.stdout, res.stderr, res.rc, res.statuses(), s.logTail(30))
		}
		time.Sleep(200 * time.Millisecond) // poll interval while the stack catches up, not synchronisation
	}
}

// checkSegment compares a run with the page.
func checkSegment(seg segment, res segResult) error {
	if e := seg.expect; e != nil {
		if e.status != 0 {
			if len(res.calls) == 0 {
				return fmt.Errorf("# → %s: no HTTP call was made", e.src)
			}
			for _, c := range res.calls {
				if c.status != e.status {
					return fmt.Errorf("# → %s: %s answered %d", e.src, c, c.status)
				}
			}
		}
		if e.hasBody {
			got, ok := lastJSON(res.stdout)
			if !ok {
				return fmt.Errorf("# → %s: no JSON was printed", e.src)
			}
			if err := matchJSON(e.fields, got, "", true); err != nil {
				return fmt.Errorf("# → %s: %w", e.src, err)
			}
		}
		if res.rc != e.exit {
			return fmt.Errorf("# → %s: exit status %d", e.src, res.rc)
		}
		if e.text != "" {
			out := res.stdout
			if strings.TrimSpace(out) == "" || e.exit != 0 {
				out = res.stderr
			}
			if got := lastLine(out); !textMatches(e.text, got) {
				return fmt.Errorf("# → %s: printed %q", e.src, got)
			}
		}
		if len(seg.outputs) == 0 {
			return nil
		}
	} else if res.rc != 0 {
		return fmt.Errorf("exit status %d", res.rc)
	}
	if len(seg.outputs) == 0 {
		if len(res.calls) > 0 {
			return fmt.Errorf("%d HTTP call(s) whose answer the page does not state: add a # → comment or an output block", len(res.calls))
		}
		if len(res.tools) > 0 {
			return errors.New("a harvest or nats command whose output the page does not state: add a # → comment or an output block")
		}
		return nil
	}
	for _, c := range res.calls {
		if seg.expect == nil && !c.shown() && (c.status < 200 || c.status > 299) {
			return fmt.Errorf("%s answered %d, which it does not print (add -i)", c, c.status)
		}
	}
	want, err := items(strings.Join(seg.outputs, "\n"), true)
	if err != nil {
		return fmt.Errorf("the page's output: %w", err)
	}
	got, err := items(res.stdout, false)
	if err != nil {
		return err
	}
	return matchItems(want, got)
}

var (
	harvestGoRun  = regexp.MustCompile(`go run \./cmd/harvest\b`)
	defaultAddr   = regexp.MustCompile(`\b(localhost|127\.0\.0\.1):8080\b`)
	envAssignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)
	shortFlags    = regexp.MustCompile(`^-[a-zA-Z]+$`)
)

func rewriteForStack(script, addr string) string {
	script = harvestGoRun.ReplaceAllString(script, "harvest")
	return defaultAddr.ReplaceAllString(script, addr)
}

// restartCommand reads a restart block: VAR=value assignments, `go run
// ./cmd/harvest dev` (or `harvest dev`), and flags.
func restartCommand(text string) (env, args []string, err error) {
	var words []string
	for _, line := range strings.Split(strings.ReplaceAll(text, "\\\n", " "), "\n") {
		if i := strings.Index(line, "#"); i >= 0 {
			line = line[:i]
		}
		words = append(words, strings.Fields(line)...)
	}
	for len(words) > 0 && envAssignment.MatchString(words[0]) {
		env, words = append(env, words[0]), words[1:]
	}
	cmd := strings.Join(words, " ")
	switch {
	case strings.HasPrefix(cmd, "go run ./cmd/harvest dev"):
		words = words[4:]
	case strings.HasPrefix(cmd, "harvest dev"):
		words = words[2:]
	default:
		return nil, nil, fmt.Errorf("a restart block is one `go run ./cmd/harvest dev` command, not %q", cmd)
	}
	for i := 0; i < len(words); i++ {
		name, _, hasValue := strings.Cut(words[i], "=")
		switch name {
		case "--addr", "--state-dir", "--nats-port":
			// the test's own
			if !hasValue {
				i++
			}
		default:
			args = append(args, words[i])
		}
	}
	return env, args, nil
}

// natsURL is the URL harvest dev wrote to its state dir, credentials
// included, as a reader exports it for the nats CLI; the port and the
// credentials stay the same across the test's restarts.
func (s *docStack) natsURL() string {
	raw, err := os.ReadFile(filepath.Join(s.stateDir, "nats.url"))
	require.NoError(s.t, err, "harvest dev writes nats.url")
	return strings.TrimSpace(string(raw))
}

// docStack is the harvest dev process the examples run against.
type docStack struct {
	t        *testing.T
	bin      string
	root     string
	stateDir string
	addr     string
	natsPort int
	cmd      *exec.Cmd
	logs     *devLog
	exited   chan error
}

// start runs harvest dev with env and args on a free address and NATS
// port, and waits until /readyz answers 200.
func (s *docStack) start(env, args []string) {
	t := s.t
	t.Helper()
	if s.addr == "" {
		// One address and NATS port for the test, as a reader's stack
		// keeps its own across restarts.
		s.addr = freeAddr(t)
		port, err := strconv.Atoi(strings.TrimPrefix(freeAddr(t), "127.0.0.1:"))
		require.NoError(t, err)
		s.natsPort = port
	}
	args = append(append([]string{"dev"}, args...), "--addr", s.addr, "--state-dir", s.stateDir, "--nats-port", strconv.Itoa(s.natsPort))
	s.cmd = exec.Command(s.bin, args...)
	s.cmd.Dir, s.cmd.Env = s.root, devEnv(env...)
	s.logs = &devLog{ready: make(chan struct{})}
	s.cmd.Stdout, s.cmd.Stderr = s.logs, s.logs
	require.NoError(t, s.cmd.Start())
	s.exited = make(chan error, 1)
	go func(cmd *exec.Cmd, exited chan error) { exited <- cmd.Wait() }(s.cmd, s.exited)

	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+s.addr+"/readyz", nil)
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		select {
		case err := <-s.exited:
			t.Fatalf("harvest %v exited (%v) before it was ready; logs:\n%s", args, err, s.logs)
		case <-ctx.Done():
			t.Fatalf("harvest %v: /readyz did not answer 200 within 90s; logs:\n%s", args, s.logs)
		case <-time.After(100 * time.Millisecond): // poll interval
		}
	}
}

// stop sends SIGINT, as Ctrl-C does, and requires a clean exit.
func (s *docStack) stop() {
	t := s.t
	t.Helper()
	if s.cmd == nil {
		return
	}
	require.NoError(t, s.cmd.Process.Signal(syscall.SIGINT))
	select {
	case err := <-s.exited:
		require.NoError(t, err, "harvest dev exits cleanly on SIGINT; logs:\n%s", s.logs)
	case <-time.After(60 * time.Second):
		t.Fatalf("harvest dev did not stop within 60s of SIGINT; logs:\n%s", s.logs)
	}
	s.cmd = nil
}

// logTail is the last n lines harvest dev logged.
func (s *docStack) logTail(n int) string {
	if s.logs == nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(s.logs.String(), "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

func (s *docStack) kill() {
	if s.cmd != nil {
		_ = s.cmd.Process.Kill()
		_ = <-s.exited // killed: it exits with an error
		s.cmd = nil
	}
}

// curlRecorder is a curl that records each call's arguments and answer
// headers (-D) in $DOCTEST_CALLS, and is otherwise the real one.
func curlRecorder(real string) string {
	return `#!/bin/sh
f="$DOCTEST_CALLS/$(date +%s%N).$$"
for a in "$@"; do printf '%s\0' "$a"; done > "$f.args"
exec ` + real + ` -D "$f.hdr" "$@"
`
}

// curlCall is one curl a segment ran.
type curlCall struct {
	args   []string
	status int // 0 when no answer came
}

func (c curlCall) String() string {
	for _, a := range c.args {
		if strings.Contains(a, "://") || strings.Contains(a, "127.0.0.1:") {
			return c.method() + " " + a
		}
	}
	return "curl " + strings.Join(c.args, " ")
}

func (c curlCall) method() string {
	m := "GET"
	for i, a := range c.args {
		switch {
		case (a == "-X" || a == "--request") && i+1 < len(c.args):
			return strings.ToUpper(c.args[i+1])
		case strings.HasPrefix(a, "-X") && len(a) > 2:
			return strings.ToUpper(a[2:])
		case slices.Contains([]string{"-d", "--data", "--data-binary", "--data-raw", "--data-urlencode", "--json", "-F", "--form"}, a):
			m = "POST"
		case a == "-T" || a == "--upload-file":
			m = "PUT"
		}
	}
	return m
}

var keyHeader = regexp.MustCompile(`(?i)^(x-)?idempotency-key:\s*\S`)

// safe says whether sending the call again changes nothing: a read, or a
// request Harvest deduplicates by its key (a webhook by its event id).
func (c curlCall) safe() bool {
	if m := c.method(); m == "GET" || m == "HEAD" {
		return true
	}
	for _, a := range c.args {
		if keyHeader.MatchString(a) || strings.Contains(a, "idempotency_key=") ||
			strings.Contains(a, `"idempotency_key"`) || strings.Contains(a, "/hooks/") {
			return true
		}
	}
	return false
}

// shown says whether the call prints its status: -i, or -w with the code.
func (c curlCall) shown() bool {
	for i, a := range c.args {
		switch {
		case a == "--include":
			return true
		case (a == "-w" || a == "--write-out") && i+1 < len(c.args) && strings.Contains(c.args[i+1], "_code}"):
			return true
		case shortFlags.MatchString(a) && strings.ContainsRune(a, 'i') && !strings.ContainsAny(a, "XHdowDFTuAemb"):
			return true
		}
	}
	return false
}

// segResult is what one segment did.
type segResult struct {
	stdout, stderr string
	rc             int
	calls          []curlCall
	tools          []string // harvest and nats commands run
}

func (r segResult) statuses() []int {
	var s []int
	for _, c := range r.calls {
		s = append(s, c.status)
	}
	return s
}

var toolReads = regexp.MustCompile(`^(harvest (workflow (describe|history|list|children|state)|schedule (list|describe|fires)|commands|version|admission list|worker list|task-queue show)|nats (stream (get|info|ls|view)|kv get))\b`)

// repeatable says whether running the segment again is safe: every call
// it made is, and the harvest and nats commands it ran only read.
func (r segResult) repeatable() bool {
	if len(r.calls) == 0 && len(r.tools) == 0 {
		return false
	}
	for _, c := range r.calls {
		if !c.safe() {
			return false
		}
	}
	for _, h := range r.tools {
		if !toolReads.MatchString(h) && !strings.Contains(h, "--idempotency-key") {
			return false
		}
	}
	return true
}

// docShell is one sh session: a page's blocks are fed to it in order.
type docShell struct {
	t     *testing.T
	cmd   *exec.Cmd
	stdin io.WriteCloser
	lines chan string
	dir   string // the session's folder, its working directory
	calls string // where the curl recorder writes
	n     int
}

func newDocShell(t *testing.T, dir, calls string, env []string) *docShell {
	t.Helper()
	cmd := exec.Command("sh")
	cmd.Dir = dir
	cmd.Env = devEnv(append(env, "DOCTEST_CALLS="+calls)...)
	stdin, err := cmd.StdinPipe()
	require.NoError(t, err)
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	require.NoError(t, cmd.Start())
	sh := &docShell{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 64), dir: dir, calls: calls}
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			sh.lines <- sc.Text()
		}
		close(sh.lines)
	}()
	t.Cleanup(func() { _ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); _ = cmd.Wait() })
	return sh
}

// run feeds script to the session, in a group whose output goes to files,
// and waits (up to a minute) for the session to say it is done.
func (sh *docShell) run(script string) segResult {
	t := sh.t
	t.Helper()
	sh.n++
	out := filepath.Join(sh.dir, fmt.Sprintf(".seg%d.out", sh.n))
	errf := filepath.Join(sh.dir, fmt.Sprintf(".seg%d.err", sh.n))
	done := fmt.Sprintf("<<<doc-test %d", sh.n)
	_, err := fmt.Fprintf(sh.stdin, "{ :\n%s\n} </dev/null >'%s' 2>'%s'\necho \"%s $?\"\n", script, out, errf, done)
	require.NoError(t, err)
	timeout := time.After(time.Minute)
	var res segResult
	for waiting := true; waiting; {
		select {
		case line, ok := <-sh.lines:
			require.True(t, ok, "the sh session ended (a syntax error?) running:\n%s", script)
			if rc, found := strings.CutPrefix(line, done+" "); found {
				res.rc, _ = strconv.Atoi(rc)
				waiting = false
			}
		case <-timeout:
			t.Fatalf("still running after a minute:\n%s", script)
		}
	}
	b, _ := os.ReadFile(out)
	res.stdout = string(b)
	b, _ = os.ReadFile(errf)
	res.stderr = string(b)
	res.calls = sh.takeCalls()
	for _, line := range strings.Split(harvestGoRun.ReplaceAllString(script, "harvest"), "\n") {
		if l := strings.TrimSpace(line); strings.HasPrefix(l, "harvest ") || strings.HasPrefix(l, "nats ") {
			res.tools = append(res.tools, l)
		}
	}
	return res
}

// takeCalls reads and removes the curl recorder's files, in call order.
func (sh *docShell) takeCalls() []curlCall {
	entries, err := os.ReadDir(sh.calls)
	require.NoError(sh.t, err)
	var names []string
	for _, e := range entries {
		if n, ok := strings.CutSuffix(e.Name(), ".args"); ok {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	var calls []curlCall
	for _, n := range names {
		args, _ := os.ReadFile(filepath.Join(sh.calls, n+".args"))
		hdr, _ := os.ReadFile(filepath.Join(sh.calls, n+".hdr"))
		c := curlCall{args: strings.Split(strings.TrimSuffix(string(args), "\x00"), "\x00")}
		for _, line := range strings.Split(string(hdr), "\n") {
			if m := statusLine.FindStringSubmatch(strings.TrimSpace(line)); m != nil {
				c.status, _ = strconv.Atoi(m[1])
			}
		}
		calls = append(calls, c)
		_ = os.Remove(filepath.Join(sh.calls, n+".args"))
		_ = os.Remove(filepath.Join(sh.calls, n+".hdr"))
	}
	return calls
}

func (sh *docShell) close() {
	_ = sh.stdin.Close()
	_ = sh.cmd.Wait()
}
