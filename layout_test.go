package harvest_test

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// The map a new engineer reads first must be the territory: these tests
// hold docs/architecture.md's package tables and each package's doc.go to
// the repository as it is (CONTRIBUTING.md says where things go).

// packageDirs are the repository's Go packages, as paths from its root
// ("." for the root package), with the names of their non-test files.
func packageDirs(t *testing.T) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if path != "." && (strings.HasPrefix(d.Name(), ".") || d.Name() == "testdata" || d.Name() == "node_modules") {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") && !strings.HasSuffix(path, "_test.go") {
			dir := filepath.ToSlash(filepath.Dir(path))
			out[dir] = append(out[dir], d.Name())
		}
		return nil
	})
	require.NoError(t, err)
	return out
}

// TestArchitectureNamesEveryPackage: docs/architecture.md's "Packages"
// section names every package (but the mains under cmd/, which its text
// covers, and the e2e tests), and names none that does not exist.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	t.Parallel()
	raw, err := os.ReadFile("docs/architecture.md")
	require.NoError(t, err)
	doc := string(raw)
	start := strings.Index(doc, "\n## Packages")
	require.GreaterOrEqual(t, start, 0, "docs/architecture.md has a Packages section")
	section := doc[start+1:]
	if end := strings.Index(section, "\n## "); end >= 0 {
		section = section[:end]
	}
	named := map[string]bool{}
	for _, m := range regexp.MustCompile("`([a-z][a-z0-9_/]*)`").FindAllStringSubmatch(section, -1) {
		named[m[1]] = true
	}
	dirs := packageDirs(t)
	for dir := range dirs {
		if dir == "." || dir == "e2e" || strings.HasPrefix(dir, "cmd/") || strings.HasPrefix(dir, "e2e/") {
			continue
		}
		require.True(t, named[dir], "docs/architecture.md#packages does not name package %s: add it to a table, saying what it owns", dir)
	}
	for name := range named {
		if !strings.HasPrefix(name, "internal/") || strings.HasSuffix(name, "/") {
			continue
		}
		_, ok := dirs[name]
		if fi, err := os.Stat(name); err == nil && fi.IsDir() {
			ok = true // a folder of packages (internal/dev)
		}
		require.True(t, ok, "docs/architecture.md#packages names %s, which is no package", name)
	}
}

// fileMapHeading starts a doc.go's map of its package's files.
const fileMapHeading = "// Where things are:"

// mapAbove is how many files a package may have (doc.go not counted)
// before a newcomer needs its doc.go to say which file holds what: past a
// screenful of names, a listing no longer explains itself.
const mapAbove = 8

// TestDocFileMapsAreTrue: a package of more than mapAbove files has a map
// of them in its doc.go (fileMapHeading), and a package whose doc.go maps
// its files names each of its files there, and no file it does not have.
func TestDocFileMapsAreTrue(t *testing.T) {
	t.Parallel()
	goFile := regexp.MustCompile(`\b([a-z0-9_]+(?:\.[a-z0-9_]+)*\.go)\b`)
	maps := 0
	for dir, files := range packageDirs(t) {
		count := len(files)
		if slices.Contains(files, "doc.go") {
			count--
		}
		// A package without a doc.go has no map; that is an error only
		// past mapAbove files.
		raw, _ := os.ReadFile(filepath.Join(dir, "doc.go"))
		doc := string(raw)
		i := strings.Index(doc, fileMapHeading)
		if i < 0 {
			require.LessOrEqual(t, count, mapAbove, "package %s has %d files (doc.go not counted), more than %d: map them in its doc.go, after a %q line, as internal/scheduler/doc.go does", dir, count, mapAbove, fileMapHeading)
			continue
		}
		maps++
		fileMap := doc[i:]
		mentioned := map[string]bool{}
		for _, m := range goFile.FindAllStringSubmatch(fileMap, -1) {
			mentioned[m[1]] = true
		}
		for _, f := range files {
			if f == "doc.go" {
				continue
			}
			require.True(t, mentioned[f], "%s/doc.go's map of files does not say what %s holds", dir, f)
		}
		for f := range mentioned {
			require.True(t, slices.Contains(files, f), "%s/doc.go's map of files names %s, which the package does not have", dir, f)
		}
	}
	require.NotZero(t, maps, "no doc.go has a map of its files (%q)", fileMapHeading)
}

// TestDocsNameIdentifiersThatExist: a doc.go, or docs/architecture.md,
// that names an identifier of one of Harvest's internal packages
// (dedup.TaskMsgID) names one the package declares.
func TestDocsNameIdentifiersThatExist(t *testing.T) {
	t.Parallel()
	dirs := packageDirs(t)
	// The identifiers each package declares, by the package's last path
	// element (the name docs use).
	declared := map[string]map[string]bool{}
	fset := token.NewFileSet()
	for dir := range dirs {
		if !strings.HasPrefix(dir, "internal/") {
			continue
		}
		name := filepath.Base(dir)
		// The package's own files, not its tests.
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		require.NoError(t, err)
		ids := map[string]bool{}
		for _, file := range files {
			if strings.HasSuffix(file, "_test.go") {
				continue
			}
			f, err := parser.ParseFile(fset, file, nil, 0)
			require.NoError(t, err)
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					ids[d.Name.Name] = true
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							ids[s.Name.Name] = true
						case *ast.ValueSpec:
							for _, n := range s.Names {
								ids[n.Name] = true
							}
						}
					}
				}
			}
		}
		declared[name] = ids
	}
	ref := regexp.MustCompile(`\b([a-z][a-z0-9]*)\.([A-Z][A-Za-z0-9_]*)\b`)
	check := func(file, text string) {
		for _, m := range ref.FindAllStringSubmatch(text, -1) {
			ids, ok := declared[m[1]]
			if !ok {
				continue
			}
			require.True(t, ids[m[2]], "%s names %s.%s, which package %s does not declare", file, m[1], m[2], m[1])
		}
	}
	raw, err := os.ReadFile("docs/architecture.md")
	require.NoError(t, err)
	check("docs/architecture.md", string(raw))
	for dir := range dirs {
		raw, err := os.ReadFile(filepath.Join(dir, "doc.go"))
		if err == nil {
			check(filepath.Join(dir, "doc.go"), string(raw))
		}
	}
}
