package config

import (
	"cmp"
	"fmt"

	"github.com/harvest-engine/harvest/internal/placement"
)

// StoreConfig is one PostgreSQL store of Config.Stores.
type StoreConfig struct {
	Name            string `yaml:"name"`
	DatabaseURL     string `yaml:"database_url"`
	DatabaseURLFile string `yaml:"database_url_file"`
	// Mode is writable (the default) or read_only: a draining store
	// serves its executions to completion and takes no new ones.
	Mode string `yaml:"mode"`
}

// StoreSet is the stores of the configuration, nil for one database_url.
func (c Config) StoreSet() (*placement.Set, error) {
	if len(c.Stores) == 0 {
		return nil, nil
	}
	list := make([]placement.Store, len(c.Stores))
	for i, st := range c.Stores {
		list[i] = placement.Store{Name: st.Name, Mode: placement.Mode(cmp.Or(st.Mode, string(placement.Writable)))}
	}
	set, err := placement.New(list)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return set, nil
}

// StoreURLs are the database URLs of the stores, in their order: the
// stores', or database_url alone.
func (c Config) StoreURLs() []string {
	if len(c.Stores) == 0 {
		return []string{c.DatabaseURL}
	}
	urls := make([]string, len(c.Stores))
	for i, st := range c.Stores {
		urls[i] = st.DatabaseURL
	}
	return urls
}
