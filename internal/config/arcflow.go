package config

// ArcFlowConfig is the ArcFlow-compatible part of Config.
type ArcFlowConfig struct {
	// Secrets, when set, make external callbacks
	// (POST /v1/runs/{run_id}/external/{binding_id}) require
	// X-Harvest-Signature: t=<unix seconds>,v1=<hex HMAC-SHA256 of the
	// timestamp, method, path, idempotency key and body> under one of
	// them, its timestamp within 5 minutes; several are accepted at once,
	// for rotation (HARVEST_ARCFLOW_SECRET sets one).
	Secrets []string `yaml:"secrets"`
	// LegacyBodyOnlySignatures also takes callbacks signed the old way,
	// X-ArcFlow-Signature: sha256=<hex HMAC-SHA256 of the body>. Unsafe:
	// such a signature binds nothing but the body, so a captured callback
	// can be replayed to any run, binding and key, at any time.
	LegacyBodyOnlySignatures bool `yaml:"legacy_body_only_signatures"`
}
