package service

import (
	"fmt"
	"os"

	"github.com/spf13/pflag"
)

// Flag is a configuration key that commands take on their command line
// too. A flag stands in for the key's environment variable: when given it
// overrides the variable, which overrides the file, and it is read and
// checked as the variable would be.
type Flag string

// The configuration flags. Every command that takes one gives it the same
// name, meaning and variable.
const (
	FlagNATSURL     Flag = "nats-url"
	FlagDatabaseURL Flag = "database-url"
	FlagAddr        Flag = "addr"
	FlagAdminAddr   Flag = "admin-addr"
	FlagShards      Flag = "shards"
	FlagTaskQueue   Flag = "task-queue"
	FlagLogLevel    Flag = "log-level"
	FlagLogFormat   Flag = "log-format"
)

// flags lists every Flag, in the order of --help and the reference.
func flags() []Flag {
	return []Flag{FlagAddr, FlagAdminAddr, FlagNATSURL, FlagDatabaseURL, FlagShards, FlagTaskQueue, FlagLogLevel, FlagLogFormat}
}

// flagSpec is what a Flag stands for.
type flagSpec struct {
	key, env, usage, def string
	isInt                bool
}

func (f Flag) spec() flagSpec {
	switch f {
	case FlagNATSURL:
		return flagSpec{key: "nats_url", env: "HARVEST_NATS_URL", usage: "the NATS server, or several comma-separated"}
	case FlagDatabaseURL:
		return flagSpec{key: "database_url", env: "HARVEST_DATABASE_URL", usage: "the PostgreSQL server, postgres://…"}
	case FlagAddr:
		return flagSpec{key: "http_addr", env: "HARVEST_HTTP_ADDR", usage: "the HTTP API's listen address", def: "127.0.0.1:8080"}
	case FlagAdminAddr:
		return flagSpec{key: "admin_addr", env: "HARVEST_ADMIN_ADDR", usage: "serve /healthz, /readyz and /metrics on this address", def: "none"}
	case FlagShards:
		return flagSpec{key: "shards", env: "HARVEST_SHARDS", usage: "logical shards, fixed for a deployment's life", def: "16", isInt: true}
	case FlagTaskQueue:
		return flagSpec{key: "task_queue", env: "HARVEST_TASK_QUEUE", usage: "the task queue to pull from", def: "default"}
	case FlagLogLevel:
		return flagSpec{key: "log_level", env: "HARVEST_LOG_LEVEL", usage: "debug, info, warn or error", def: "info"}
	case FlagLogFormat:
		return flagSpec{key: "log_format", env: "HARVEST_LOG_FORMAT", usage: "text or json", def: "text"}
	}
	panic(fmt.Sprintf("service: no flag %q", string(f)))
}

// Usage is the flag's help text: its meaning, then where its value comes
// from when it is not given.
func (f Flag) Usage() string {
	s := f.spec()
	from := fmt.Sprintf("$%s, else the config file's %s", s.env, s.key)
	if s.def != "" {
		from += ", else " + s.def
	}
	return fmt.Sprintf("%s (default %s)", s.usage, from)
}

// Env is the environment variable the flag stands in for.
func (f Flag) Env() string { return f.spec().env }

// AddFlags adds configuration flags to fs. One not given leaves its
// key to the variable and the file.
func AddFlags(fs *pflag.FlagSet, add ...Flag) {
	for _, f := range add {
		if f.spec().isInt {
			fs.Int(string(f), 0, f.Usage())
		} else {
			fs.String(string(f), "", f.Usage())
		}
	}
}

// flagEnv reads the environment with the configuration flags given on fs
// standing in for their variables.
func flagEnv(fs *pflag.FlagSet) func(string) string {
	given := map[string]string{}
	for _, f := range flags() {
		if fl := fs.Lookup(string(f)); fl != nil && fl.Changed {
			given[f.Env()] = fl.Value.String()
		}
	}
	return func(name string) string {
		if v, ok := given[name]; ok {
			return v
		}
		return os.Getenv(name)
	}
}
