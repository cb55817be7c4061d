package harvestcheck_test

import (
	"bytes"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"golang.org/x/tools/go/analysis"
	"golang.org/x/tools/go/analysis/checker"
	"golang.org/x/tools/go/packages"

	"github.com/harvest-engine/harvest/harvestcheck"
)

// TestRepositoryWorkflowsAreDeterministic runs the analyzer over the
// repository's own workflow code, tests included: the examples, the test
// kit, and every other package whose files mention a WorkflowContext
// (found by reading the tree, so that a new one is checked too). It
// reports nothing, or the examples teach what the analyzer forbids.
func TestRepositoryWorkflowsAreDeterministic(t *testing.T) {
	t.Parallel()
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	patterns := workflowPackages(t, root)
	for _, want := range []string{"./examples", "./harvesttest"} {
		require.Contains(t, patterns, want, "the examples and the test kit register workflows; the search for them is broken")
	}

	cfg := &packages.Config{Dir: root, Mode: packages.LoadAllSyntax, Tests: true}
	pkgs, err := packages.Load(cfg, patterns...)
	require.NoError(t, err)
	var loadErrs []string
	packages.Visit(pkgs, nil, func(p *packages.Package) {
		for _, e := range p.Errors {
			loadErrs = append(loadErrs, e.Error())
		}
	})
	require.Empty(t, loadErrs, "the packages must load and type-check before they can be analysed")

	graph, err := checker.Analyze([]*analysis.Analyzer{harvestcheck.Analyzer}, pkgs, &checker.Options{SanityCheck: true})
	require.NoError(t, err)
	var analysed []string
	var reports []string
	for _, act := range graph.Roots {
		require.NoError(t, act.Err, "analysing %s", act.Package.ID)
		analysed = append(analysed, act.Package.PkgPath)
		for _, d := range act.Diagnostics {
			reports = append(reports, act.Package.Fset.Position(d.Pos).String()+": "+d.Message)
		}
	}
	require.Contains(t, analysed, "github.com/harvest-engine/harvest/examples")
	if len(reports) > 0 {
		slices.Sort(reports)
		t.Fatalf("workflow code in the repository that a replay could not repeat:\n%s", strings.Join(slices.Compact(reports), "\n"))
	}
	t.Logf("analysed %s", strings.Join(patterns, " "))
}

// workflowPackages returns, as ./relative patterns, the directories under
// root whose Go files mention harvest's WorkflowContext or
// RegisterWorkflow. It skips testdata (the analyzer's own cases are meant
// to be reported) and hidden directories.
func workflowPackages(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); path != root && (name == "testdata" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") {
			return nil
		}
		src, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		if !bytes.Contains(src, []byte("WorkflowContext")) && !bytes.Contains(src, []byte("RegisterWorkflow")) {
			return nil
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		dir := "."
		if rel != "." {
			dir = "./" + filepath.ToSlash(rel)
		}
		if !slices.Contains(dirs, dir) {
			dirs = append(dirs, dir)
		}
		return nil
	})
	require.NoError(t, err)
	return dirs
}
