package registry_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/dedup"
	"github.com/harvest-engine/harvest/internal/registry"
)

// A default build id is the binary's build and a hash of its workflows'
// names: the same for the same names in any order, another for other
// names, and always one the deployment accepts.
func TestDefaultBuildIDTellsCodeApart(t *testing.T) {
	t.Parallel()
	a := registry.DefaultBuildID("(devel)+75549c2a1b3c.dirty", []string{"charge", "refund"})
	require.Regexp(t, `^devel\+75549c2a1b3c\.dirty~[0-9a-f]{8}$`, a)
	require.Equal(t, a, registry.DefaultBuildID("(devel)+75549c2a1b3c.dirty", []string{"refund", "charge"}))
	require.NotEqual(t, a, registry.DefaultBuildID("(devel)+75549c2a1b3c.dirty", []string{"charge"}), "other workflows")
	require.NotEqual(t, a, registry.DefaultBuildID("v1.4.0", []string{"charge", "refund"}), "another binary")
	for _, build := range []string{"(devel)", "v1.4.0", "v2.0.0-rc.1+incompatible", "weird version/with spaces"} {
		require.NoError(t, dedup.ValidateBuildID(registry.DefaultBuildID(build, []string{"w"})), build)
	}
}
