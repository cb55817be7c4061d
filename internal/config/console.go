package config

// ConsoleConfig is the web console's part of Config.
type ConsoleConfig struct {
	// TrustedProxies are the proxies (IP addresses or CIDRs) whose
	// X-Forwarded-Proto: https says that the console's user came over
	// TLS, so that the session cookie is marked Secure.
	TrustedProxies []string `yaml:"trusted_proxies"`
	// SessionTTL is how long a console sign-in lasts, default 12h.
	SessionTTL Duration `yaml:"session_ttl"`
}
