-- Retention: a closed execution is pruned, with every row that names it,
-- once prune_after (its close plus its workflow's retention, set when it
-- closes) has passed. The pruner reads each shard's in prune_after order.
ALTER TABLE executions ADD COLUMN prune_after timestamptz;
CREATE INDEX executions_prune_after_idx ON executions (shard, prune_after) WHERE prune_after IS NOT NULL;
-- Executions closed before this migration have no prune_after: the
-- pruner sets it from their close and the configured retention, finding
-- them through this index, which is empty once it has.
CREATE INDEX executions_prune_after_unset_idx ON executions (shard) WHERE closed_at IS NOT NULL AND prune_after IS NULL;
-- The tables a prune deletes from churn: every row is inserted, then
-- deleted a retention later. Vacuumed at PostgreSQL's default (when a
-- fifth of a table is dead) they would grow by a fifth of their live size
-- before their space is reused; vacuumed at 2% they stay near it.
ALTER TABLE executions SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE history_events SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE activities SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE timers SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE signal_claims SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE start_claims SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE callback_deliveries SET (autovacuum_vacuum_scale_factor = 0.02);
ALTER TABLE command_outcomes SET (autovacuum_vacuum_scale_factor = 0.02);
