-- Concurrency start policies (docs/start-policies.md#concurrency): at
-- most a limit of a key's executions run; the others are created Pending
-- and begin, in the order their starts came, as running ones close. The
-- key's state is its start_policy_keys row (kind 'concurrency'): running
-- counts the executions holding a slot, queued the Pending ones, climit
-- is the latest start's limit. An execution under the policy names it
-- (executions.concurrency: its key, limit and when it began), so that its
-- close gives its slot back without a read.
ALTER TABLE executions ADD COLUMN concurrency jsonb;
ALTER TABLE start_policy_keys ADD COLUMN running int NOT NULL DEFAULT 0, ADD COLUMN climit int NOT NULL DEFAULT 0;
DROP INDEX start_policy_keys_stale_idx;
CREATE INDEX start_policy_keys_stale_idx ON start_policy_keys (stale_at) WHERE open_group IS NULL AND queued = 0 AND running = 0;
-- The keys of a shard with a free slot and an execution waiting for it.
CREATE INDEX start_policy_keys_release_idx ON start_policy_keys (shard) WHERE kind = 'concurrency' AND queued > 0;

-- The Pending executions of each concurrency key, in the order their
-- starts came (seq: the start command's stream sequence).
CREATE TABLE concurrency_waiting (
    execution_id uuid PRIMARY KEY,
    shard int NOT NULL,
    workflow_name text NOT NULL,
    policy_key text NOT NULL,
    seq bigint NOT NULL
);
CREATE INDEX concurrency_waiting_key_idx ON concurrency_waiting (workflow_name, policy_key, seq);

-- A Pending execution waits for its key's slot. The constraint is added
-- unchecked, then checked under a lock that lets the table be written,
-- rather than checked holding every write back.
ALTER TABLE executions DROP CONSTRAINT executions_status_check;
ALTER TABLE executions ADD CONSTRAINT executions_status_check
	CHECK (status IN ('Pending', 'Running', 'Completed', 'Failed', 'Cancelled', 'Terminated', 'TimedOut', 'ContinuedAsNew')) NOT VALID;
ALTER TABLE executions VALIDATE CONSTRAINT executions_status_check;
