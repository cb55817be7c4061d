package ingest

import (
	"context"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/sourcegraph/conc/iter"
)

// The stores ingest reads: a deployment's PostgreSQL stores, in the order
// of its layout (Topology.Layout). An execution is read in the store its
// id names; a command's outcome in the store of the shard it was
// published to; a listing gathers every store's.

// pools are the stores: Config.Stores, or Config.DB alone; none when
// ingest has no database.
func (s *Server) pools() []*pgxpool.Pool {
	if len(s.cfg.Stores) > 0 {
		return s.cfg.Stores
	}
	if s.cfg.DB == nil {
		return nil
	}
	return []*pgxpool.Pool{s.cfg.DB}
}

// hasDB says whether ingest has stores to read.
func (s *Server) hasDB() bool { return s.cfg.DB != nil || len(s.cfg.Stores) > 0 }

// poolOfShard is the store that holds shard.
func (s *Server) poolOfShard(shard int) *pgxpool.Pool {
	return s.pool(s.cfg.Topology.Layout().StoreOfShard(shard))
}

// poolOf is the store an execution id names.
func (s *Server) poolOf(executionID string) *pgxpool.Pool {
	return s.pool(s.cfg.Topology.Layout().StoreOf(executionID))
}

func (s *Server) pool(i int) *pgxpool.Pool {
	pools := s.pools()
	if i < 0 || i >= len(pools) {
		return nil
	}
	return pools[i]
}

// eachStore runs read on every store at once and returns their results in
// the stores' order, or the first error.
func eachStore[T any](ctx context.Context, s *Server, read func(ctx context.Context, store int, db *pgxpool.Pool) (T, error)) ([]T, error) {
	pools := s.pools()
	idx := make([]int, len(pools))
	for i := range idx {
		idx[i] = i
	}
	return iter.MapErr(idx, func(i *int) (T, error) { return read(ctx, *i, pools[*i]) })
}
