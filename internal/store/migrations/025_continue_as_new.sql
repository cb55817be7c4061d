-- Continue-as-new (docs/long-workflows.md): a run that continues closes as
-- ContinuedAsNew and names the run it started (continued_as), which names
-- it back (continued_from). chain_id is the first run of the chain, NULL
-- for a first run itself: keyed signals are claimed under it, so that a
-- key dedupes across the whole chain, and a signal to any run of it
-- reaches the chain's newest (the one continued_as is NULL for).
ALTER TABLE executions
	ADD COLUMN chain_id uuid,
	ADD COLUMN continued_from uuid,
	ADD COLUMN continued_as uuid;
CREATE INDEX executions_chain ON executions (chain_id) WHERE chain_id IS NOT NULL;
ALTER TABLE executions DROP CONSTRAINT executions_status_check;
ALTER TABLE executions ADD CONSTRAINT executions_status_check
	CHECK (status IN ('Running', 'Completed', 'Failed', 'Cancelled', 'Terminated', 'TimedOut', 'ContinuedAsNew'));
