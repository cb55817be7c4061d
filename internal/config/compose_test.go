package config_test

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/harvest-engine/harvest/internal/config"
)

// composeFile is the part of docker-compose.yml the test reads.
type composeFile struct {
	Services map[string]struct {
		Image       string            `yaml:"image"`
		Build       string            `yaml:"build"`
		Entrypoint  []string          `yaml:"entrypoint"`
		Environment map[string]string `yaml:"environment"`
		Volumes     []string          `yaml:"volumes"`
		Ports       []string          `yaml:"ports"`
		Healthcheck *struct {
			Test []string `yaml:"test"`
		} `yaml:"healthcheck"`
		Deploy struct {
			Replicas int `yaml:"replicas"`
		} `yaml:"deploy"`
		Secrets []string `yaml:"secrets"`
	} `yaml:"services"`
	Secrets map[string]struct {
		File string `yaml:"file"`
	} `yaml:"secrets"`
}

// TestComposeRunsTheProductionShape reads docker-compose.yml: every
// service's configuration file exists and loads (so every key it sets is
// known), NATS is a 3-node cluster of the release Harvest builds against
// with 3 replicas, and each tier has its replicas and a health check.
func TestComposeRunsTheProductionShape(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	require.NoError(t, err)
	var compose composeFile
	require.NoError(t, yaml.Unmarshal(data, &compose))

	gomod, err := os.ReadFile("../../go.mod")
	require.NoError(t, err)
	version := regexp.MustCompile(`github.com/nats-io/nats-server/v2 v(\S+)`).FindSubmatch(gomod)
	require.NotNil(t, version)

	var natsNodes, configured []string
	for name, svc := range compose.Services {
		if strings.HasPrefix(svc.Image, "nats:") {
			natsNodes = append(natsNodes, name)
			require.Equal(t, "nats:"+string(version[1])+"-alpine", svc.Image, "%s runs the nats-server release of go.mod", name)
			require.Equal(t, name, svc.Environment["NATS_SERVER_NAME"])
			require.NotNil(t, svc.Healthcheck, name)
			continue
		}
		if svc.Build == "" {
			continue
		}
		require.NotNil(t, svc.Healthcheck, "%s has a health check", name)
		for i, arg := range svc.Entrypoint {
			if arg != "--config" {
				continue
			}
			configured = append(configured, name)
			path := filepath.Join("../../configs", strings.TrimPrefix(svc.Entrypoint[i+1], "/etc/harvest/"))
			c, err := config.Load(path)
			require.NoError(t, err, "%s's configuration", name)
			require.Equal(t, 3, c.NATSReplicas, "%s replicates what it declares", name)
			require.Equal(t, "nats://nats-1:4222,nats://nats-2:4222,nats://nats-3:4222", c.NATSURL, name)
			require.Equal(t, 2, svc.Deploy.Replicas, "%s runs two replicas", name)
			require.Empty(t, svc.Ports, "%s publishes no fixed host port", name)
		}
	}
	require.Len(t, natsNodes, 3)
	require.ElementsMatch(t, []string{"ingest", "scheduler", "worker"}, configured, "the services built from this repository, each with its configuration")

	// Every node's configuration parses as nats-server reads it, with
	// JetStream and routes to all three.
	for _, name := range natsNodes {
		t.Setenv("NATS_SERVER_NAME", name)
		opts, err := server.ProcessConfigFile("../../configs/nats.conf")
		require.NoError(t, err)
		require.Equal(t, name, opts.ServerName)
		require.True(t, opts.JetStream)
		require.Equal(t, "harvest", opts.Cluster.Name)
		require.Len(t, opts.Routes, 3)
		require.True(t, opts.SyncAlways, "every write reaches the disk before it is acknowledged (docs/deploy.md#durability)")
	}

	worker, err := config.Load("../../configs/worker.yaml")
	require.NoError(t, err)
	require.Contains(t, compose.Services, "fakepay")
	require.Equal(t, "http://fakepay:8090", worker.FakepayURL, "every worker charges through the one provider")
	ingest, err := config.Load("../../configs/ingest.yaml")
	require.NoError(t, err)
	require.NotEmpty(t, ingest.Webhooks, "the docs' webhook examples work against compose")

	// Ingest listens beyond loopback: its API requires tokens, each read
	// from a secret compose mounts.
	require.True(t, ingest.Auth.Enabled(), "ingest's API requires a token")
	for _, tok := range ingest.Auth.Tokens {
		name, ok := strings.CutPrefix(tok.TokenFile, "/run/secrets/")
		require.True(t, ok, "token %q is read from a compose secret, not %q", tok.Name, tok.TokenFile)
		require.Contains(t, compose.Services["ingest"].Secrets, name, "ingest mounts the secret of token %q", tok.Name)
		require.Contains(t, compose.Secrets, name, "compose declares the secret %s", name)
	}
}
