package api_test

import (
	"slices"
	"strings"
	"testing"

	"github.com/harvest-engine/harvest/internal/testing/golist"
)

const (
	module     = "github.com/harvest-engine/harvest"
	clientPath = module + "/client"
	// devPrefix is the dev-only packages (the one-process stack, the
	// bench), and testPrefix the test harnesses, which use the client as
	// a user does.
	devPrefix  = module + "/internal/dev/"
	testPrefix = module + "/internal/testing/"
)

// TestTheAPIIsALeaf: package api depends on the standard library alone,
// so that the machinery and the public client can both import it without
// importing each other.
func TestTheAPIIsALeaf(t *testing.T) {
	t.Parallel()
	var outside []string
	for _, line := range golist.Lines(t, "-deps", "-f", "{{.ImportPath}} {{.Standard}}", ".") {
		path, standard, _ := strings.Cut(line, " ")
		if standard != "true" && path != module+"/api" {
			outside = append(outside, path)
		}
	}
	if len(outside) > 0 {
		t.Fatalf("package api depends on packages outside the standard library: %v", outside)
	}
}

// TestTheMachineryDoesNotImportTheClient: no production package under
// internal/ but the dev-only ones and the test harnesses depends on
// package client, directly or
// through another package. The server speaks the API through package
// api; client is the user's HTTP client, so a change to it can never
// change the server. The one way in allowed is the worker SDK (the root
// package, whose typed signals send with a *client.Client), which the
// worker service runs as users do.
func TestTheMachineryDoesNotImportTheClient(t *testing.T) {
	t.Parallel()
	imports := map[string][]string{}
	for _, line := range golist.Lines(t, "-deps", "-f", "{{.ImportPath}}{{range .Imports}} {{.}}{{end}}", module+"/internal/...") {
		fields := strings.Fields(line)
		imports[fields[0]] = fields[1:]
	}
	// via[p] is how p reaches the client (p, then what it imports, down
	// to the client), or nil when it does not; the worker SDK is not
	// followed.
	via := map[string][]string{}
	var reach func(p string) []string
	reach = func(p string) []string {
		if path, seen := via[p]; seen {
			return path
		}
		via[p] = nil // a cycle ends here (Go has none, but be safe)
		switch {
		case p == clientPath:
			via[p] = []string{p}
		case p == module:
		default:
			for _, q := range imports[p] {
				if rest := reach(q); rest != nil {
					via[p] = append([]string{p}, rest...)
					break
				}
			}
		}
		return via[p]
	}
	checked := 0
	var offenders []string
	for p := range imports {
		if !strings.HasPrefix(p, module+"/internal/") || strings.HasPrefix(p, devPrefix) || strings.HasPrefix(p, testPrefix) {
			continue
		}
		checked++
		if path := reach(p); path != nil {
			offenders = append(offenders, strings.Join(path, " -> "))
		}
	}
	if checked == 0 {
		t.Fatal("go list named no package under internal/")
	}
	slices.Sort(offenders)
	if len(offenders) > 0 {
		t.Fatalf("internal packages depend on %s; import %s/api instead:\n%s", clientPath, module, strings.Join(offenders, "\n"))
	}
}
