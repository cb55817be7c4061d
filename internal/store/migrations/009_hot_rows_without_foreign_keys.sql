-- History events and activities are the rows every workflow adds several
-- of, and a foreign key checks each one with a query of its own and a lock
-- on its execution: about a sixth of PostgreSQL's CPU per W1 workflow
-- (docs/benchmarks.md). Their integrity holds without it: the scheduler
-- writes them only in the apply transaction that inserted or locked their
-- execution (FOR UPDATE), on a shard it holds. Nothing deletes executions;
-- whatever prunes them later must delete their history and activities in
-- the same transaction, which ON DELETE CASCADE used to do.
ALTER TABLE history_events DROP CONSTRAINT IF EXISTS history_events_execution_id_fkey;
ALTER TABLE activities DROP CONSTRAINT IF EXISTS activities_execution_id_fkey;
