package service_test

import (
	"slices"
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/golist"
)

// The service binaries share this package, so it is where a dev-only or
// test-only import would leak into all of them at once (it did: a
// translation of the configuration into devstack's Config, now in
// cmd/harvest, linked the embedded NATS server and PostgreSQL, the
// examples and the bench into cmd/ingest).

const module = "github.com/harvest-engine/harvest"

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
	deps := golist.Deps(t, pkgs...)
	for pkg, banned := range binaries {
		list, ok := deps[pkg]
		if !ok {
			t.Fatalf("go list did not list %s", pkg)
		}
		for _, dep := range list {
			for _, prefix := range banned {
				if golist.Within(dep, prefix) {
					t.Errorf("%s depends on %s (under %s): a production binary links only what it runs (`go list -deps -f '{{.ImportPath}}: {{.Imports}}' %s` shows which import brings it)", pkg, dep, prefix, pkg)
				}
			}
		}
	}
}
