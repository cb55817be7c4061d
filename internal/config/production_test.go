package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

func TestProductionKeysLoadFromYAMLAndTheEnvironment(t *testing.T) {
	dir := t.TempDir()
	secret := func(name, content string) string {
		p := filepath.Join(dir, name)
		require.NoError(t, os.WriteFile(p, []byte(content), 0o600))
		return p
	}
	path := secret("c.yaml", `
nats_url: nats://a:4222,nats://b:4222,nats://c:4222
nats_replicas: 3
nats_user: harvest
nats_password_file: `+secret("pw", "s3cret\n")+`
nats_tls_ca_file: /etc/harvest/nats-ca.pem
nats_tls_cert_file: /etc/harvest/nats.pem
nats_tls_key_file: /etc/harvest/nats-key.pem
database_url_file: `+secret("db", "postgres://harvest:pw@db/harvest?sslmode=verify-full\n")+`
database_max_conns: 20
admin_addr: 0.0.0.0:9090
`)
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Equal(t, "nats://a:4222,nats://b:4222,nats://c:4222", c.NATSURL)
	require.Equal(t, 3, c.NATSReplicas)
	require.Equal(t, "s3cret", c.NATSPassword, "read from its file, trimmed")
	require.Equal(t, "postgres://harvest:pw@db/harvest?sslmode=verify-full", c.DatabaseURL)
	require.Equal(t, 20, c.DatabaseMaxConns)
	require.Equal(t, "0.0.0.0:9090", c.AdminAddr)

	t.Setenv("HARVEST_NATS_REPLICAS", "5")
	t.Setenv("HARVEST_NATS_TOKEN_FILE", secret("token", "tok"))
	t.Setenv("HARVEST_ADMIN_ADDR", "127.0.0.1:0")
	t.Setenv("HARVEST_NATS_CREDENTIALS_FILE", "/etc/harvest/harvest.creds")
	c, err = config.Load(path)
	require.NoError(t, err)
	require.Equal(t, 5, c.NATSReplicas)
	require.Equal(t, "tok", c.NATSToken)
	require.Equal(t, "127.0.0.1:0", c.AdminAddr)
	require.Equal(t, "/etc/harvest/harvest.creds", c.NATSCredentialsFile)
}

func TestProductionKeysAreChecked(t *testing.T) {
	dir := t.TempDir()
	empty := filepath.Join(dir, "empty")
	require.NoError(t, os.WriteFile(empty, []byte("\n"), 0o600))
	for body, want := range map[string]string{
		"nats_replicas: 6":                                  "nats_replicas",
		"nats_replicas: -1":                                 "nats_replicas",
		"database_max_conns: -2":                            "database_max_conns",
		"nats_token: a\nnats_token_file: /x":                "nats_token and nats_token_file",
		"database_url: postgres://x\ndatabase_url_file: /x": "database_url and database_url_file",
		"nats_tls_cert_file: /c":                            "nats_tls_cert_file and nats_tls_key_file",
		"nats_password: pw":                                 "nats_password without nats_user",
		"nats_user: u\nnats_password_file: " + empty:        "is empty",
		"nats_token_file: " + filepath.Join(dir, "missing"): "nats_token_file",
	} {
		path := filepath.Join(dir, "c.yaml")
		require.NoError(t, os.WriteFile(path, []byte(body+"\n"), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want, body)
	}
}

func TestStartPoliciesLoadAndAreChecked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`workflows:
  charge:
    start_policy:
      throttle: {limit: 10, period: 1m, key: /customer_id}
  digest:
    start_policy:
      batch: {max_size: 100, max_wait: 5s}
  onboarding: {}
`), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	policies := c.StartPolicies()
	require.Len(t, policies, 2)
	require.Equal(t, "throttle", policies["charge"].Kind())
	require.Equal(t, "/customer_id", policies["charge"].KeyPointer())
	require.Equal(t, "batch", policies["digest"].Kind())

	for body, want := range map[string]string{
		"workflows: {charge: {start_policy: {throttle: {limit: 0, period: 1m}}}}":                           "workflows.charge.start_policy.throttle.limit",
		"workflows: {charge: {start_policy: {debounce: {period: 30s, key: customer_id}}}}":                  "workflows.charge.start_policy.debounce.key",
		"workflows: {charge: {start_policy: {debounce: {period: 1s}, batch: {max_size: 2, max_wait: 1s}}}}": "workflows.charge.start_policy",
		"workflows: {charge: {start_policy: {throttle: {limit: 1, period: 1m, burst: 2}}}}":                 "burst",
	} {
		require.NoError(t, os.WriteFile(path, []byte(body+"\n"), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want, body)
	}
}

// TestWorkflowTaskQueuesLoadAndAreChecked: workflows.<name>.task_queue
// loads into TaskQueues (a workflow without one is absent from it, its
// starts going to "default"), and a name a task queue cannot have is
// refused at load, naming the key, the value and the rule.
func TestWorkflowTaskQueuesLoadAndAreChecked(t *testing.T) {
	path := filepath.Join(t.TempDir(), "c.yaml")
	require.NoError(t, os.WriteFile(path, []byte(`workflows:
  approve_order:
    task_queue: mine
    versioning: pinned
  onboarding: {versioning: auto_upgrade}
`), 0o600))
	c, err := config.Load(path)
	require.NoError(t, err)
	require.Equal(t, map[string]string{"approve_order": "mine"}, c.TaskQueues())
	require.Equal(t, map[string]bool{"approve_order": true}, c.PinnedWorkflows())
	require.ElementsMatch(t, []string{"approve_order", "onboarding"}, c.DeclaredWorkflows())

	for body, want := range map[string]string{
		"workflows: {approve_order: {task_queue: my queue}}":                         `config: workflows.approve_order.task_queue "my queue": want a task queue name, 1 to 128 bytes of letters, digits, '_' and '-'`,
		"workflows: {approve_order: {task_queue: a.b}}":                              `workflows.approve_order.task_queue "a.b"`,
		"workflows: {approve_order: {task_queue: " + strings.Repeat("q", 129) + "}}": "workflows.approve_order.task_queue",
		"workflows: {approve_order: {taskqueue: mine}}":                              "taskqueue",
		"workflows: {approve_order: {versioning: sticky}}":                           `config: workflows.approve_order.versioning "sticky": want pinned or auto_upgrade`,
	} {
		require.NoError(t, os.WriteFile(path, []byte(body+"\n"), 0o600))
		_, err := config.Load(path)
		require.ErrorContains(t, err, want, body)
	}
}

func TestStoresLoadAndAreChecked(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "c.yaml")
	secret := filepath.Join(dir, "b.url")
	require.NoError(t, os.WriteFile(secret, []byte("postgres://b/harvest\n"), 0o600))
	require.NoError(t, os.WriteFile(path, []byte(`stores:
  - {name: a, database_url: "postgres://a/harvest"}
  - {name: b, database_url_file: `+secret+`, mode: read_only}
`), 0o600))
	c, err := config.LoadEnv(path, func(string) string { return "" })
	require.NoError(t, err)
	require.Equal(t, []string{"postgres://a/harvest", "postgres://b/harvest"}, c.StoreURLs())
	set, err := c.StoreSet()
	require.NoError(t, err)
	require.Equal(t, 2, set.Len())
	b, ok := set.Lookup("b")
	require.True(t, ok)
	require.Equal(t, "read_only", string(b.Mode))

	for body, want := range map[string]string{
		"database_url: postgres://x\nstores: [{name: a, database_url: postgres://a}]": "stores and database_url",
		"stores: [{name: a}]":                             "set one of database_url and database_url_file",
		"stores: [{name: A, database_url: postgres://a}]": "name",
		"stores: [{name: a, database_url: postgres://a}, {name: a, database_url: postgres://b}]": "stores[0]'s too",
		"stores: [{name: a, database_url: postgres://a, mode: draining}]":                        "mode",
		"stores: [{name: a, database_url: postgres://a, mode: read_only}]":                       "no writable store",
	} {
		require.NoError(t, os.WriteFile(path, []byte(body+"\n"), 0o600))
		_, err := config.LoadEnv(path, func(string) string { return "" })
		require.ErrorContains(t, err, want, body)
	}
}
