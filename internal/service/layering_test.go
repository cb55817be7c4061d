package service_test

import (
	"errors"
	"os/exec"
	"slices"
	"strings"
	"testing"
)

// The service binaries share this package, so it is where a dev-only or
// test-only import would leak into all of them at once (it did: a
// translation of the configuration into devstack's Config, now in
// cmd/harvest, linked the embedded NATS server and PostgreSQL, the
// examples and the bench into cmd/ingest).

const module = "github.com/harvest-engine/harvest"

// goListDeps returns, for each package pkgs name, the import paths of all
// the packages it depends on, as the go tool lists them; the test is
// skipped where there is no go tool.
func goListDeps(t *testing.T, pkgs ...string) map[string][]string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	args := append([]string{"list", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, pkgs...)
	out, err := exec.CommandContext(t.Context(), gotool, args...).Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go %s: %v", strings.Join(args, " "), err)
	}
	deps := map[string][]string{}
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) > 0 {
			deps[fields[0]] = fields[1:]
		}
	}
	return deps
}

// within says whether path is the package prefix or one under it.
func within(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}

// TestTheServiceBinariesLinkOnlyWhatTheyRun: cmd/ingest, cmd/scheduler and
// cmd/worker depend on no dev-only package (internal/dev: the one-process
// stack, the embedded PostgreSQL, the bench), no test harness
// (internal/testing) and not the NATS server, even through another
// package. Only cmd/worker, the example worker, links the examples.
func TestTheServiceBinariesLinkOnlyWhatTheyRun(t *testing.T) {
	t.Parallel()
	forbidden := []string{
		module + "/internal/dev",
		module + "/internal/testing",
		"github.com/nats-io/nats-server/v2",
	}
	binaries := map[string][]string{
		module + "/cmd/ingest":    slices.Concat(forbidden, []string{module + "/examples"}),
		module + "/cmd/scheduler": slices.Concat(forbidden, []string{module + "/examples"}),
		module + "/cmd/worker":    forbidden,
	}
	var pkgs []string
	for pkg := range binaries {
		pkgs = append(pkgs, pkg)
	}
	deps := goListDeps(t, pkgs...)
	for pkg, banned := range binaries {
		list, ok := deps[pkg]
		if !ok {
			t.Fatalf("go list did not list %s", pkg)
		}
		for _, dep := range list {
			for _, prefix := range banned {
				if within(dep, prefix) {
					t.Errorf("%s depends on %s (under %s): a production binary links only what it runs (`go list -deps -f '{{.ImportPath}}: {{.Imports}}' %s` shows which import brings it)", pkg, dep, prefix, pkg)
				}
			}
		}
	}
}
