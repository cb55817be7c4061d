// Package golist runs the go tool's list for the tests that hold
// Harvest's layering (which package may depend on which): the root
// package's, api's, harvesttype's, internal/service's and the test
// helpers' own. A test calling it is skipped where there is no go tool.
package golist

import (
	"errors"
	"os/exec"
	"strings"
	"testing"
)

// Module is Harvest's module path.
const Module = "github.com/harvest-engine/harvest"

// Lines runs `go list args...` in the test's directory and returns its
// output's lines.
func Lines(t testing.TB, args ...string) []string {
	t.Helper()
	gotool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go tool:", err)
	}
	cmd := exec.CommandContext(t.Context(), gotool, append([]string{"list"}, args...)...)
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list %s: %v\n%s", strings.Join(args, " "), err, ee.Stderr)
		}
		t.Fatalf("go list %s: %v", strings.Join(args, " "), err)
	}
	var lines []string
	for line := range strings.Lines(string(out)) {
		if line = strings.TrimSpace(line); line != "" {
			lines = append(lines, line)
		}
	}
	return lines
}

// Deps returns, for each package pkgs name (patterns allowed), the
// import paths of every package it depends on.
func Deps(t testing.TB, pkgs ...string) map[string][]string {
	t.Helper()
	return byPackage(Lines(t, append([]string{"-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}"}, pkgs...)...))
}

// Imports returns, for each package pkgs name (patterns allowed), the
// import paths it imports directly.
func Imports(t testing.TB, pkgs ...string) map[string][]string {
	t.Helper()
	return byPackage(Lines(t, append([]string{"-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}"}, pkgs...)...))
}

func byPackage(lines []string) map[string][]string {
	out := make(map[string][]string, len(lines))
	for _, line := range lines {
		fields := strings.Fields(line)
		out[fields[0]] = fields[1:]
	}
	return out
}

// Within says whether path is the package prefix or one under it.
func Within(path, prefix string) bool {
	return path == prefix || strings.HasPrefix(path, prefix+"/")
}
