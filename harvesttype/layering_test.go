package harvesttype_test

import (
	"strings"
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/golist"
)

const module = "github.com/harvest-engine/harvest"

// TestTheTypesAreALeaf: of Harvest's packages, harvesttype imports
// internal/dedup alone (for the rule of a task queue name), and through it
// only what dedup itself imports, so that the root package and the
// machinery under internal/ can both import it without a cycle. dedup is
// pure computation (no I/O, no state), so the SDK gains nothing else by
// it.
func TestTheTypesAreALeaf(t *testing.T) {
	t.Parallel()
	allowed := map[string]bool{module + "/harvesttype": true}
	for _, path := range harvestDeps(t, module+"/internal/dedup") {
		allowed[path] = true
	}
	var others []string
	for _, path := range harvestDeps(t, ".") {
		if !allowed[path] {
			others = append(others, path)
		}
	}
	if len(others) > 0 {
		t.Fatalf("package harvesttype depends on Harvest packages %v: it may import internal/dedup and what dedup imports, nothing else (`go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./harvesttype` shows which import brings them)", others)
	}
}

// harvestDeps lists the Harvest packages pkg depends on, itself included.
func harvestDeps(t *testing.T, pkg string) []string {
	t.Helper()
	out := golist.Lines(t, "-deps", "-f", "{{.ImportPath}}", pkg)
	var harvest []string
	for _, path := range out {
		if path == module || strings.HasPrefix(path, module+"/") {
			harvest = append(harvest, path)
		}
	}
	return harvest
}
