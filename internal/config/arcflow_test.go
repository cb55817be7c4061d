package config_test

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
	"github.com/harvest-engine/harvest/internal/service"
)

// TestArcFlowLegacySignaturesAreExplicit: the body-only signature scheme
// is off unless arcflow.legacy_body_only_signatures says true, reaches
// ingest's configuration when it does, and needs secrets.
func TestArcFlowLegacySignaturesAreExplicit(t *testing.T) {
	t.Parallel()
	load := func(yaml string) (config.Config, error) {
		path := filepath.Join(t.TempDir(), "c.yaml")
		require.NoError(t, os.WriteFile(path, []byte(yaml), 0o600))
		return config.Load(path)
	}
	c, err := load("arcflow:\n  secrets: [s1]\n")
	require.NoError(t, err)
	require.False(t, c.ArcFlow.LegacyBodyOnlySignatures)
	require.False(t, service.IngestConfig(c).ArcFlowLegacyBodyOnly)

	c, err = load("arcflow:\n  secrets: [s1]\n  legacy_body_only_signatures: true\n")
	require.NoError(t, err)
	require.True(t, service.IngestConfig(c).ArcFlowLegacyBodyOnly)

	_, err = load("arcflow:\n  legacy_body_only_signatures: true\n")
	require.ErrorContains(t, err, "arcflow.legacy_body_only_signatures without arcflow.secrets")
}
