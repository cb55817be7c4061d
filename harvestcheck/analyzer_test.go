package harvestcheck_test

import (
	"testing"

	"golang.org/x/tools/go/analysis/analysistest"

	"github.com/harvest-engine/harvest/harvestcheck"
)

// TestAnalyzer runs the analyzer over testdata/src: example.com/workflows
// holds a case of each rule and the cases it must leave alone,
// example.com/helper the functions it follows through facts. The
// expected diagnostics and facts are the // want comments.
func TestAnalyzer(t *testing.T) {
	t.Parallel()
	analysistest.Run(t, analysistest.TestData(), harvestcheck.Analyzer, "example.com/helper", "example.com/workflows")
}
