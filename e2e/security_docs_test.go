package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/auth"
	"github.com/harvest-engine/harvest/internal/dev/devstack"
	"github.com/harvest-engine/harvest/internal/ingest"
	"github.com/harvest-engine/harvest/internal/testing/stacktest"
)

// TestTheSecurityExamplesRun runs the curl examples of docs/security.md,
// as written, against a stack with the page's configuration: each block's
// first line says the status it gets ("# ...: 403"); a block that prints
// a status (-w '%{http_code}') must print it, one that fails on an error
// status (-f) must succeed.
func TestTheSecurityExamplesRun(t *testing.T) {
	if _, err := exec.LookPath("curl"); err != nil {
		t.Skip("no curl on this machine")
	}
	doc, err := os.ReadFile("../docs/security.md")
	require.NoError(t, err)
	billing, err := auth.NewToken()
	require.NoError(t, err)
	ops, err := auth.NewToken()
	require.NoError(t, err)
	a, err := auth.New([]auth.Token{
		{Name: "billing-service", SHA256: auth.Hash(billing), Scopes: []auth.Scope{auth.ScopeStart, auth.ScopeSignal, auth.ScopeRead}, Workflows: []string{"charge", "refund"}},
		{Name: "ops", SHA256: auth.Hash(ops), Scopes: []auth.Scope{auth.ScopeAdmin}},
	})
	require.NoError(t, err)
	s := stacktest.Start(t, devstack.Config{Ingest: ingest.Config{Auth: a}})
	dir := t.TempDir()
	require.NoError(t, os.WriteFile(filepath.Join(dir, "billing.token"), []byte(billing+"\n"), 0o600))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "ops.token"), []byte(ops+"\n"), 0o600))

	blocks := regexp.MustCompile("(?s)```sh\n(.*?)```").FindAllStringSubmatch(string(doc), -1)
	status := regexp.MustCompile(`^# .*: (\d{3})$`)
	ran := 0
	for _, b := range blocks {
		script := b[1]
		if !strings.Contains(script, "curl ") {
			continue
		}
		first, _, _ := strings.Cut(script, "\n")
		m := status.FindStringSubmatch(first)
		require.NotNil(t, m, "a curl example's first line says its status: %q", first)
		script = strings.ReplaceAll(script, "localhost:8080", strings.TrimPrefix(s.URL(), "http://"))
		cmd := exec.Command("sh", "-e", "-c", script)
		cmd.Dir = dir
		out, err := cmd.Output()
		t.Logf("%s\n%s", first, out)
		if strings.Contains(script, "%{http_code}") {
			require.NoError(t, err, first)
			lines := strings.Split(strings.TrimSpace(string(out)), "\n")
			require.Equal(t, m[1], lines[len(lines)-1], first)
		} else {
			require.True(t, strings.HasPrefix(m[1], "2"), "a -f example expects success: %q", first)
			require.NoError(t, err, "%s: %s", first, out)
		}
		ran++
	}
	require.GreaterOrEqual(t, ran, 5, "the page's curl examples were found")
}
