package service

import (
	"os"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"github.com/stretchr/testify/require"
)

// TestEveryFlagIsDocumented: docs/configuration.md has a row for each
// configuration flag, naming its key and variable.
func TestEveryFlagIsDocumented(t *testing.T) {
	data, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	for _, f := range flags() {
		s := f.spec()
		row := "| `--" + string(f) + "` | `" + s.key + "` | `" + s.env + "` |"
		require.Contains(t, string(data), row, "docs/configuration.md, Command-line flags")
	}
	require.Contains(t, string(data), "| `--config` | — | `"+EnvConfig+"` |")
}

// TestFlagsReadAsTheirVariables: each flag, given, is what its variable
// reads; one not given leaves the environment's.
func TestFlagsReadAsTheirVariables(t *testing.T) {
	fs := pflag.NewFlagSet("x", pflag.ContinueOnError)
	AddFlags(fs, flags()...)
	t.Setenv("HARVEST_TASK_QUEUE", "from-env")
	var args []string
	for _, f := range flags() {
		if f == FlagTaskQueue {
			continue
		}
		v := "v-" + string(f)
		if f.spec().isInt {
			v = "7"
		}
		args = append(args, "--"+string(f), v)
	}
	require.NoError(t, fs.Parse(args))
	getenv := flagEnv(fs)
	for _, f := range flags() {
		want := "v-" + string(f)
		switch {
		case f == FlagTaskQueue:
			want = "from-env"
		case f.spec().isInt:
			want = "7"
		}
		require.Equal(t, want, getenv(f.Env()), f)
		require.True(t, strings.HasPrefix(f.Env(), "HARVEST_"), f)
	}
}
