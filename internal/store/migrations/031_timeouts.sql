-- Run and execution timeouts (docs/cancellation.md#timeouts): how long the
-- run and its chain of continued runs may take, and when each ends
-- (store.Timeouts). Set when the run is created; durable timers end them.
ALTER TABLE executions ADD COLUMN timeouts jsonb;
