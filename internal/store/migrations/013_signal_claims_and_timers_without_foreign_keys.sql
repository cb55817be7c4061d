-- Keyed signal claims and timers are rows a workflow adds many of (W3:
-- ten signal claims per execution), and each foreign key check is a
-- query of its own, planned anew on every row under plan_cache_mode
-- force_custom_plan (store.PoolConfig): about 0.02 ms of PostgreSQL CPU
-- per row. As for history events and activities (migration 009), the
-- scheduler writes them only in an apply transaction of the shard it
-- holds, for an execution that transaction inserted or read, and nothing
-- deletes executions; whatever prunes executions later must delete their
-- signal claims and timers in the same transaction.
ALTER TABLE signal_claims DROP CONSTRAINT IF EXISTS signal_claims_execution_id_fkey;
ALTER TABLE timers DROP CONSTRAINT IF EXISTS timers_execution_id_fkey;
