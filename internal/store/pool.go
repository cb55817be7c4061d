package store

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"
)

// PoolConfig parses a PostgreSQL URL into the pool configuration Harvest
// runs with.
//
// It plans every statement for its own parameters
// (plan_cache_mode=force_custom_plan) unless the URL sets plan_cache_mode
// itself. pgx prepares each statement once per connection, and after five
// runs PostgreSQL may switch a prepared statement to a generic plan: one
// chosen without the arrays' lengths, and kept until the table is next
// analyzed. The apply's statements take arrays of a batch's keys
// (`= ANY($1)`, `unnest($1, $2)`), and a generic plan picked while a table
// was nearly empty scans the whole table on every call once it is not, so
// the cost of a workflow grew with the number already stored until
// autovacuum analyzed the tables. Planning each call costs tens of
// microseconds per statement, a batch's statements being shared by its
// commands.
func PoolConfig(url string) (*pgxpool.Config, error) {
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	return cfg, nil
}

// NewPool connects a pool configured by PoolConfig.
func NewPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	cfg, err := PoolConfig(url)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
