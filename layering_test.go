package harvest_test

import (
	"strings"
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/golist"
)

// TestTheSDKLinksNoExporterNorDevCode: the packages a user's worker and
// its tests import (harvest, client, harvesttest) depend on the
// OpenTelemetry API alone, not on its SDK, the OTLP exporters or gRPC, so
// that none of those enters the user's go.mod: a worker traces with the
// TracerProvider its program gives it (WorkerConfig.TracerProvider), and
// only Harvest's own binaries build one from the OTEL_* environment
// (internal/tracing/otlpsetup). Nor do they depend on Harvest's dev-only
// packages, its test harnesses or the NATS server.
func TestTheSDKLinksNoExporterNorDevCode(t *testing.T) {
	t.Parallel()
	const module = "github.com/harvest-engine/harvest"
	forbidden := []string{
		"google.golang.org/grpc",
		"go.opentelemetry.io/otel/exporters",
		"go.opentelemetry.io/otel/sdk",
		module + "/internal/tracing/otlpsetup",
		module + "/internal/dev",
		module + "/internal/testing",
		"github.com/nats-io/nats-server/v2",
	}
	pkgs := []string{module, module + "/client", module + "/harvesttest"}
	deps := golist.Deps(t, pkgs...)
	for _, pkg := range pkgs {
		list, ok := deps[pkg]
		if !ok {
			t.Fatalf("go list did not list %s", pkg)
		}
		for _, dep := range list {
			for _, prefix := range forbidden {
				if dep == prefix || strings.HasPrefix(dep, prefix+"/") {
					t.Errorf("%s depends on %s (under %s), which would enter every user's build (`go list -deps -f '{{.ImportPath}}: {{.Imports}}' %s` shows which import brings it)", pkg, dep, prefix, pkg)
				}
			}
		}
	}
}
