package config

import (
	"bytes"
	"fmt"
	"os"
)

// secretFile is a secret read from path into dst, for key.
type secretFile struct {
	key  string
	path string
	dst  *string
}

// readSecretFiles reads the secrets given as files into their fields, so
// that a secret never has to sit in the configuration itself. Surrounding
// white space (a trailing newline) is dropped.
func (c *Config) readSecretFiles() error {
	secrets := []secretFile{
		{"nats_password_file", c.NATSPasswordFile, &c.NATSPassword},
		{"nats_token_file", c.NATSTokenFile, &c.NATSToken},
		{"database_url_file", c.DatabaseURLFile, &c.DatabaseURL},
	}
	for i := range c.Stores {
		secrets = append(secrets, secretFile{fmt.Sprintf("stores[%d].database_url_file", i), c.Stores[i].DatabaseURLFile, &c.Stores[i].DatabaseURL})
	}
	for _, s := range secrets {
		if s.path == "" {
			continue
		}
		data, err := os.ReadFile(s.path)
		if err != nil {
			return fmt.Errorf("config: %s: %w", s.key, err)
		}
		if *s.dst = string(bytes.TrimSpace(data)); *s.dst == "" {
			return fmt.Errorf("config: %s: %s is empty", s.key, s.path)
		}
	}
	return nil
}
