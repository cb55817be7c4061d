-- Timers by execution: each apply batch deletes the timers of the
-- activities that finished and of the executions that closed, which
-- without this index scans every pending timer of every shard.
CREATE INDEX timers_execution_id_idx ON timers (execution_id);
