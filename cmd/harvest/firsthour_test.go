package main

import (
	"net"
	"runtime"
	"runtime/debug"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

func TestVersionText(t *testing.T) {
	t.Parallel()
	info := &debug.BuildInfo{
		Main: debug.Module{Path: "github.com/harvest-engine/harvest", Version: "v0.4.0"},
		Settings: []debug.BuildSetting{
			{Key: "vcs", Value: "git"},
			{Key: "vcs.revision", Value: "64f6d143a51678f9a9e7eb018223aadd636f0d3c"},
			{Key: "vcs.time", Value: "2026-12-04T23:44:47Z"},
			{Key: "vcs.modified", Value: "true"},
		},
	}
	require.Equal(t, "harvest v0.4.0\nrevision 64f6d143a51678f9a9e7eb018223aadd636f0d3c (2026-12-04T23:44:47Z), modified\ngo1.26.0 linux/amd64\n",
		versionText(info, "go1.26.0", "linux/amd64"))

	info = &debug.BuildInfo{Main: debug.Module{Path: "github.com/harvest-engine/harvest", Version: "(devel)"}}
	require.Equal(t, "harvest (devel)\nrevision unknown (the build recorded none: built outside a git checkout, by go run, or with -buildvcs=false)\ngo1.26.0 linux/amd64\n",
		versionText(info, "go1.26.0", "linux/amd64"))

	out, _, err := runCLI(t, "version")
	require.NoError(t, err)
	require.Contains(t, out, "harvest ")
	require.Contains(t, out, runtime.Version()+" "+runtime.GOOS+"/"+runtime.GOARCH+"\n")
}

// closedAddr is an address where nothing listens.
func closedAddr(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := l.Addr().String()
	require.NoError(t, l.Close())
	return addr
}

// TestAPICommandsSayWhatToDoWhenNothingAnswers: every command that talks
// to the HTTP API, given an address where nothing listens, says to start
// harvest dev or to point --addr or HARVEST_ADDR at a Harvest.
func TestAPICommandsSayWhatToDoWhenNothingAnswers(t *testing.T) {
	addr := closedAddr(t)
	want := "no Harvest API answers at http://" + addr + ": start one with `harvest dev`, or point --addr or HARVEST_ADDR at yours ("
	for _, args := range [][]string{
		{"workflow", "start", "onboarding"},
		{"workflow", "signal", "e1", "item"},
		{"workflow", "update", "e1", "add"},
		{"workflow", "describe", "e1"},
		{"workflow", "history", "e1"},
		{"workflow", "list"},
		{"workflow", "concurrency", "onboarding", "--key", "c1"},
		{"commands", "get", "c1"},
		{"commands", "dead"},
		{"commands", "dead", "1"},
		{"admission", "close", "onboarding", "--reason", "r"},
		{"admission", "open", "onboarding"},
		{"admission", "list"},
	} {
		_, _, err := runCLI(t, append(args, "--addr", addr)...)
		require.ErrorContains(t, err, want, args)
		require.ErrorContains(t, err, "connection refused", args)
	}
	t.Setenv("HARVEST_ADDR", "http://"+addr)
	_, _, err := runCLI(t, "workflow", "list")
	require.ErrorContains(t, err, want, "HARVEST_ADDR")

	_, _, err = runCLI(t, "bench", "--workload", "W1", "--addr", "http://"+addr)
	require.ErrorContains(t, err, "no Harvest API answers at http://"+addr+": start one with `harvest dev`, point --addr at yours, or leave --addr out")
}

// TestMigrateWithoutADatabaseNamesItsFlag: harvest migrate with no
// database names --database-url and the variable.
func TestMigrateWithoutADatabaseNamesItsFlag(t *testing.T) {
	t.Setenv("HARVEST_DATABASE_URL", "")
	t.Setenv("HARVEST_CONFIG", "")
	_, _, err := runCLI(t, "migrate")
	require.EqualError(t, err, "no database to migrate: pass --database-url postgres://…, or set HARVEST_DATABASE_URL, or database_url in the --config file")

	out, _, err := runCLI(t, "migrate", "--database-url", pgtest.NewDatabase(t))
	require.NoError(t, err)
	require.Equal(t, "schema is up to date\n", out)
}
