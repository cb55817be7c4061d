package harvesttype_test

import (
	"os/exec"
	"strings"
	"testing"
)

// TestTheTypesAreALeaf: package harvesttype imports no Harvest package,
// directly or through another package, so that the root package and the
// machinery under internal/ can both import it without a cycle.
func TestTheTypesAreALeaf(t *testing.T) {
	t.Parallel()
	const module = "github.com/harvest-engine/harvest"
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	out, err := exec.CommandContext(t.Context(), gotool, "list", "-deps", "-f", "{{.ImportPath}}", ".").Output()
	if err != nil {
		var stderr string
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("go list -deps: %v\n%s", err, stderr)
	}
	var harvest []string
	for _, path := range strings.Fields(string(out)) {
		if (path == module || strings.HasPrefix(path, module+"/")) && path != module+"/harvesttype" {
			harvest = append(harvest, path)
		}
	}
	if len(harvest) > 0 {
		t.Fatalf("package harvesttype depends on Harvest packages %v: it must stay a leaf (`go list -deps -f '{{.ImportPath}}: {{.Imports}}' ./harvesttype` shows which import brings them)", harvest)
	}
}
