package bench

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// TableSize is one table's row count and total size (heap, indexes and
// TOAST: pg_total_relation_size).
type TableSize struct {
	Rows  int64 `json:"rows"`
	Bytes int64 `json:"bytes"`
}

// TableSample is every Harvest table's size at AtS seconds into the run.
type TableSample struct {
	AtS    float64              `json:"at_s"`
	Tables map[string]TableSize `json:"tables"`
}

// sampleTables reads every table of the stack's schema.
func sampleTables(ctx context.Context, db *pgxpool.Pool) (map[string]TableSize, error) {
	rows, err := db.Query(ctx, `
		SELECT c.relname::text, pg_total_relation_size(c.oid) FROM pg_class AS c
		WHERE c.relkind = 'r' AND c.relnamespace = current_schema()::regnamespace ORDER BY 1`)
	if err != nil {
		return nil, fmt.Errorf("bench: table sizes: %w", err)
	}
	type rel struct {
		Name  string
		Bytes int64
	}
	rels, err := pgx.CollectRows(rows, pgx.RowToStructByPos[rel])
	if err != nil {
		return nil, fmt.Errorf("bench: table sizes: %w", err)
	}
	b := &pgx.Batch{}
	out := make(map[string]TableSize, len(rels))
	for _, r := range rels {
		b.Queue(`SELECT count(*) FROM ` + pgx.Identifier{r.Name}.Sanitize()).QueryRow(func(row pgx.Row) error {
			var n int64
			if err := row.Scan(&n); err != nil {
				return err
			}
			out[r.Name] = TableSize{Rows: n, Bytes: r.Bytes}
			return nil
		})
	}
	if err := db.SendBatch(ctx, b).Close(); err != nil {
		return nil, fmt.Errorf("bench: table rows: %w", err)
	}
	return out, nil
}

// sampler samples the tables every interval from start until stop
// closes, and once more then.
func (l *Local) sampler(ctx context.Context, every time.Duration, start time.Time, stop <-chan struct{}) <-chan []TableSample {
	done := make(chan []TableSample, 1)
	go func() {
		var samples []TableSample
		take := func() {
			t, err := sampleTables(ctx, l.db)
			if err == nil {
				samples = append(samples, TableSample{AtS: round(time.Since(start).Seconds()), Tables: t})
			}
		}
		ticker := time.NewTicker(every)
		defer ticker.Stop()
		take()
		for {
			select {
			case <-ctx.Done():
				done <- samples
				return
			case <-stop:
				take()
				done <- samples
				return
			case <-ticker.C:
				take()
			}
		}
	}()
	return done
}

// SeedBacklog inserts n executions of the bench workflow that closed long
// ago, as W1 leaves them (a keyless start, one activity: four history
// events and an activity row each). When due, they are past their
// retention, for a run to measure W1 while the pruner works through them;
// otherwise they are inside it and the pruner leaves them: the same
// tables without the pruning, to compare with.
func (l *Local) SeedBacklog(ctx context.Context, n int, shards int, due bool) error {
	pruneAfter := "now() - interval '1 day'"
	if !due {
		pruneAfter = "now() + interval '1 day'"
	}
	const chunk = 20000
	for done := 0; done < n; done += chunk {
		m := min(chunk, n-done)
		_, err := l.db.Exec(ctx, `
			WITH e AS (
				INSERT INTO executions (execution_id, shard, workflow_name, workflow_id, task_queue, status, input, result,
					last_seq, created_at, updated_at, closed_at, prune_after)
				SELECT gen_random_uuid(), g % $2, 'bench_echo', 'backlog-' || $3::int + g, 'default', 'Completed', '{"n": 1}', '{"n": 1}',
					4, now() - interval '9 days', now() - interval '8 days', now() - interval '8 days', `+pruneAfter+`
				FROM generate_series(1, $1) AS g
				RETURNING execution_id
			), h AS (
				INSERT INTO history_events (execution_id, seq, type, at, attrs)
				SELECT e.execution_id, s.seq, s.type, now() - interval '8 days', '{"n": 1}'
				FROM e, (VALUES (1, 'WorkflowStarted'), (2, 'ActivityScheduled'), (3, 'ActivityCompleted'), (4, 'WorkflowCompleted')) AS s(seq, type)
			)
			INSERT INTO activities (execution_id, activity_id, activity_name, status, attempt, idempotency_key, scheduled_at, closed_at, input)
			SELECT e.execution_id, 1, 'bench_echo_activity', 'Completed', 1, e.execution_id::text || '/1', now() - interval '8 days',
				now() - interval '8 days', '{"n": 1}'
			FROM e`, m, shards, done)
		if err != nil {
			return fmt.Errorf("bench: seed the retention backlog: %w", err)
		}
	}
	// A database that grew to this size has statistics; without them the
	// planner takes the fresh tables for empty and scans them whole for
	// every prune until autovacuum first analyzes them.
	if _, err := l.db.Exec(ctx, `ANALYZE executions, history_events, activities`); err != nil {
		return fmt.Errorf("bench: analyze the retention backlog: %w", err)
	}
	return nil
}
