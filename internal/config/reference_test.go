package config_test

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/harvest-engine/harvest/internal/config"
)

// referenceRow is a row of docs/configuration.md: `key` | `ENV` | ...
type referenceRow struct{ key, env string }

func readReference(t *testing.T) []referenceRow {
	t.Helper()
	data, err := os.ReadFile("../../docs/configuration.md")
	require.NoError(t, err)
	row := regexp.MustCompile("(?m)^\\| (`[a-z_]+`|—) \\| (`HARVEST_[A-Z_]+`|—)")
	var rows []referenceRow
	for _, m := range row.FindAllStringSubmatch(string(data), -1) {
		rows = append(rows, referenceRow{key: strings.Trim(m[1], "`"), env: strings.Trim(m[2], "`")})
	}
	require.NotEmpty(t, rows)
	return rows
}

// yamlKeys maps each top-level key of the configuration to its field.
func yamlKeys() map[string]int {
	keys := map[string]int{}
	typ := reflect.TypeFor[config.Config]()
	for i := range typ.NumField() {
		if tag := typ.Field(i).Tag.Get("yaml"); tag != "" && tag != "-" {
			keys[strings.Split(tag, ",")[0]] = i
		}
	}
	return keys
}

// envNames are the HARVEST_ variables the configuration's code reads.
func envNames(t *testing.T) map[string]bool {
	t.Helper()
	names := map[string]bool{}
	for _, file := range []string{"env.go", "../service/configfile.go", "../service/flags.go"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		for _, n := range regexp.MustCompile(`"(HARVEST_[A-Z_]+)"`).FindAllStringSubmatch(string(src), -1) {
			names[n[1]] = true
		}
	}
	return names
}

func TestTheReferenceListsEveryKeyAndVariable(t *testing.T) {
	rows := readReference(t)
	keys, envs := yamlKeys(), envNames(t)
	documented, documentedEnv := map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		if r.key != "—" {
			_, ok := keys[r.key]
			require.True(t, ok, "docs/configuration.md documents %q, which the configuration does not have", r.key)
			documented[r.key] = true
		}
		if r.env != "—" {
			require.True(t, envs[r.env], "docs/configuration.md documents %s, which nothing reads", r.env)
			documentedEnv[r.env] = true
		}
	}
	for key := range keys {
		require.True(t, documented[key], "configuration key %q has no row in docs/configuration.md", key)
	}
	for env := range envs {
		require.True(t, documentedEnv[env], "%s has no row in docs/configuration.md", env)
	}
}

// TestEachVariableSetsItsKey sets each documented variable alone and
// checks that it is the documented key that changes.
func TestEachVariableSetsItsKey(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "secret")
	require.NoError(t, os.WriteFile(file, []byte("postgres://x\n"), 0o600))
	// Values that pass validation, by key; a key set alone that needs a
	// companion gets it from companions.
	values := map[string]string{
		"log_level": "warn", "log_format": "json", "idempotency_fingerprint": "reject", "nats_replicas": "3",
		"nats_password_file": file, "nats_token_file": file, "database_url_file": file,
		"nats_command_stream_max_bytes": "8388608", "nats_task_stream_max_bytes": "8388608",
	}
	companions := map[string]map[string]string{
		"nats_password":      {"HARVEST_NATS_USER": "u"},
		"nats_password_file": {"HARVEST_NATS_USER": "u"},
		"nats_tls_cert_file": {"HARVEST_NATS_TLS_KEY_FILE": "/k"},
		"nats_tls_key_file":  {"HARVEST_NATS_TLS_CERT_FILE": "/c"},
	}
	keys := yamlKeys()
	base, err := config.Load("")
	require.NoError(t, err)
	for _, r := range readReference(t) {
		if r.key == "—" || r.env == "—" {
			continue
		}
		t.Run(r.env, func(t *testing.T) {
			field := reflect.TypeFor[config.Config]().Field(keys[r.key])
			value, ok := values[r.key]
			if !ok {
				switch field.Type.Kind() {
				case reflect.Int:
					value = "2"
				case reflect.Int64:
					value = "2"
					if field.Type == reflect.TypeFor[config.Duration]() {
						value = (3 * time.Minute).String()
					}
				case reflect.Bool:
					value = "true"
				default:
					value = "x"
				}
			}
			t.Setenv(r.env, value)
			for name, v := range companions[r.key] {
				t.Setenv(name, v)
			}
			c, err := config.Load("")
			require.NoError(t, err)
			got, was := reflect.ValueOf(c).Field(keys[r.key]), reflect.ValueOf(base).Field(keys[r.key])
			require.NotEqual(t, was.Interface(), got.Interface(), "%s=%s left %s as it was", r.env, value, r.key)
		})
	}
}
