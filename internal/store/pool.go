package store

import (
	"context"
	"fmt"
	"math"

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
//
// The URL's other parameters pass through to the driver unchanged: TLS
// (sslmode, sslrootcert, sslcert, sslkey), pool_max_conns and the like.
func PoolConfig(url string) (*pgxpool.Config, error) {
	return PoolConfigWith(url, PoolOptions{})
}

// PoolOptions are the pool's settings beyond its URL. Zero values leave
// the URL's setting, else the driver's default.
type PoolOptions struct {
	// MaxConns caps the pool's connections, over the URL's pool_max_conns
	// (and its pool_min_conns and pool_min_idle_conns, lowered to it);
	// the driver's default is the larger of 4 and the number of CPUs.
	MaxConns int
}

// PoolConfigWith is PoolConfig with opts applied.
func PoolConfigWith(url string, opts PoolOptions) (*pgxpool.Config, error) {
	if opts.MaxConns < 0 || opts.MaxConns > math.MaxInt32 {
		return nil, fmt.Errorf("postgres pool: MaxConns %d: want 1 to %d", opts.MaxConns, math.MaxInt32)
	}
	cfg, err := pgxpool.ParseConfig(url)
	if err != nil {
		return nil, fmt.Errorf("postgres url: %w", err)
	}
	if _, set := cfg.ConnConfig.RuntimeParams["plan_cache_mode"]; !set {
		cfg.ConnConfig.RuntimeParams["plan_cache_mode"] = "force_custom_plan"
	}
	if opts.MaxConns > 0 {
		cfg.MaxConns = int32(opts.MaxConns)
		cfg.MinConns = min(cfg.MinConns, cfg.MaxConns)
		cfg.MinIdleConns = min(cfg.MinIdleConns, cfg.MaxConns)
	}
	return cfg, nil
}

// NewPool connects a pool configured by PoolConfig.
func NewPool(ctx context.Context, url string) (*pgxpool.Pool, error) {
	return NewPoolWith(ctx, url, PoolOptions{})
}

// NewPoolWith connects a pool configured by PoolConfigWith.
func NewPoolWith(ctx context.Context, url string, opts PoolOptions) (*pgxpool.Pool, error) {
	cfg, err := PoolConfigWith(url, opts)
	if err != nil {
		return nil, err
	}
	return pgxpool.NewWithConfig(ctx, cfg)
}
