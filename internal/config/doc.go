// Package config loads the configuration of Harvest's services: a YAML file
// (see configs/), then HARVEST_* environment variables over it. Every
// field has a documented default, so an empty file is valid.
//
// It only reads and validates: it opens no connection and starts nothing;
// internal/service turns a Config into running services.
package config

// Where things are:
//
//   - config.go: Config, every key with its default, Load and LoadEnv. A
//     new key goes there, in env.go (its HARVEST_* variable), in
//     validate.go when it can be wrong, and in docs/configuration.md.
//   - validate.go: Validate, which names the first bad key. secrets.go:
//     the secrets read from *_file keys. log.go: the process's logger.
//   - One file per part of Config that has its own type: auth.go (the
//     API's tokens), stores.go (several PostgreSQL stores), workflows.go
//     (per-workflow settings: retention, start policies, task queues),
//     arcflow.go (the ArcFlow-compatible API), console.go (the web
//     console), history.go (the limits of executions' histories).
