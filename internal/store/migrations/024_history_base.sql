-- The history a worker saw at the execution's last completed workflow
-- task (its base_seq): the next task carries the events from there on,
-- not the whole history; a worker that does not hold the execution in
-- its cache fetches the rest (docs/architecture.md#workflow-tasks-and-histories).
ALTER TABLE executions ADD COLUMN history_base int NOT NULL DEFAULT 0;
