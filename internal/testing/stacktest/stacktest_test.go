package stacktest_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/harvest-engine/harvest/internal/testing/golist"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// TestOnlyTestsImportTheTestHelpers: no package's own code (its non-test
// files) imports the test helpers: stacktest links the whole stack, and
// none of them belongs in a binary.
func TestOnlyTestsImportTheTestHelpers(t *testing.T) {
	t.Parallel()
	const module = "github.com/harvest-engine/harvest"
	helpers := []string{module + "/internal/testing/stacktest", module + "/internal/testing/probe", module + "/internal/testing/browsertest"}
	imports := golist.Imports(t, module+"/...")
	listed := 0
	for pkg, imps := range imports {
		listed++
		for _, imp := range imps {
			for _, h := range helpers {
				if imp == h && !strings.HasPrefix(pkg, module+"/internal/testing/") {
					t.Errorf("%s imports %s in a non-test file: only _test.go files may", pkg, imp)
				}
			}
		}
	}
	if listed < 10 {
		t.Fatalf("go list listed %d packages", listed)
	}
}
