-- Retention: a closed execution is pruned, with every row that names it,
-- once prune_after (its close plus its workflow's retention, set when it
-- closes) has passed. The pruner reads each shard's in prune_after order.
ALTER TABLE executions ADD COLUMN prune_after timestamptz;
CREATE INDEX executions_prune_after_idx ON executions (shard, prune_after) WHERE prune_after IS NOT NULL;
-- Executions closed before this migration have no prune_after: the
-- pruner sets it from their close and the configured retention, finding
-- them through this index, which is empty once it has.
CREATE INDEX executions_prune_after_unset_idx ON executions (shard) WHERE closed_at IS NOT NULL AND prune_after IS NULL;
