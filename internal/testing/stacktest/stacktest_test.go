package stacktest_test

import (
	"errors"
	"os/exec"
	"strings"
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOnlyTestsImportTheTestHelpers: no package's own code (its non-test
// files) imports the test helpers: stacktest links the whole stack, and
// none of them belongs in a binary.
func TestOnlyTestsImportTheTestHelpers(t *testing.T) {
	t.Parallel()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	const module = "github.com/harvest-engine/harvest"
	helpers := []string{module + "/internal/testing/stacktest", module + "/internal/testing/probe", module + "/internal/testing/browsertest"}
	out, err := exec.CommandContext(t.Context(), gotool, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, module+"/...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	listed := 0
	for line := range strings.Lines(string(out)) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		listed++
		for _, imp := range fields[1:] {
			for _, h := range helpers {
				if imp == h && !strings.HasPrefix(fields[0], module+"/internal/testing/") {
					t.Errorf("%s imports %s in a non-test file: only _test.go files may", fields[0], imp)
				}
			}
		}
	}
	if listed < 10 {
		t.Fatalf("go list listed %d packages:\n%s", listed, out)
	}
}
