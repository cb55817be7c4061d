package devstack

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/harvest-engine/harvest/internal/placement"
	"github.com/harvest-engine/harvest/internal/store"
)

// StoreConfig is one PostgreSQL store of a stack with several.
type StoreConfig struct {
	Name        string
	DatabaseURL string
	Mode        placement.Mode
}

// openStores opens, migrates and sets in the streams' configuration the
// stack's stores, when it has several: the first is DB.
func (s *Stack) openStores(ctx context.Context) error {
	if len(s.cfg.Stores) == 0 {
		return nil
	}
	list := make([]placement.Store, len(s.cfg.Stores))
	for i, st := range s.cfg.Stores {
		list[i] = placement.Store{Name: st.Name, Mode: st.Mode}
	}
	set, err := placement.New(list)
	if err != nil {
		return err
	}
	s.cfg.Streams.Stores = set
	s.Pools = []*pgxpool.Pool{s.DB}
	for _, st := range s.cfg.Stores[1:] {
		url := st.DatabaseURL
		if url == "" && s.pg != nil {
			// A database of its own on the private PostgreSQL.
			name := "harvest_" + st.Name
			if err := createDatabase(ctx, s.pg.URL("postgres"), name); err != nil {
				return fmt.Errorf("store %s: %w", st.Name, err)
			}
			url = s.pg.URL(name)
		}
		pcfg, err := store.PoolConfigWith(url, store.PoolOptions{MaxConns: s.cfg.DatabaseMaxConns})
		if err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
		pcfg.ConnConfig.Tracer = s.cfg.DBTracer
		db, err := pgxpool.NewWithConfig(ctx, pcfg)
		if err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
		s.Pools = append(s.Pools, db)
		if _, err := store.Migrate(ctx, db); err != nil {
			return fmt.Errorf("store %s: %w", st.Name, err)
		}
	}
	return nil
}

// pools are the stores the stack's schedulers apply: Pools, or DB alone.
func (s *Stack) pools() []*pgxpool.Pool {
	if len(s.Pools) > 0 {
		return s.Pools
	}
	return []*pgxpool.Pool{s.DB}
}
