package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/harvest-engine/harvest/internal/store"
	"github.com/harvest-engine/harvest/internal/testing/pgtest"
)

// BenchmarkApplyStartBatch measures one apply transaction of a batch of
// keyed starts against a real PostgreSQL: the batched claim and state
// reads, the decisions, and the one-round-trip write. ns/op is per batch;
// starts/s is the throughput of a single shard doing only this.
func BenchmarkApplyStartBatch(b *testing.B) {
	for _, size := range []int{1, 64, 256} {
		b.Run(fmt.Sprintf("batch=%d", size), func(b *testing.B) {
			db := pgtest.NewPool(b)
			ctx := context.Background()
			if err := store.EnsureShards(ctx, db, 1); err != nil {
				b.Fatal(err)
			}
			leases, err := store.AcquireLeases(ctx, db, "bench", time.Hour, 1)
			if err != nil || len(leases) != 1 {
				b.Fatalf("lease: %v", err)
			}
			env := applyEnv{shard: leases[0].Shard, shards: 1, window: time.Hour, log: slog.New(slog.DiscardHandler)}
			seq := uint64(0)
			b.ReportAllocs()
			for b.Loop() {
				cmds := make([]seqCommand, size)
				for i := range cmds {
					seq++
					cmds[i] = seqCommand{seq: seq, cmd: startCmd("bench_echo", fmt.Sprintf("k%d", seq), "")}
				}
				err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
					applied, err := store.LockShard(ctx, tx, "bench", leases[0])
					if err != nil {
						return err
					}
					w, err := apply(ctx, tx, env, applied, cmds)
					if err != nil {
						return err
					}
					return store.Write(ctx, tx, w)
				})
				if err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N*size)/b.Elapsed().Seconds(), "starts/s")
		})
	}
}
