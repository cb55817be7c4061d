-- Task priorities (docs/start-policies.md#priorities): an execution's
-- workflow tasks, and its activities' unless their options say
-- otherwise, go to its task queue at its priority, 1 (lowest) to 5
-- (highest). Existing executions keep the default, 3, which is also the
-- subject their tasks always had. A deferred start keeps the priority
-- its request gave (NULL: the default). The checks hold for new rows at
-- once and are validated without a long lock on the tables.
ALTER TABLE executions ADD COLUMN priority smallint NOT NULL DEFAULT 3;
ALTER TABLE executions ADD CONSTRAINT executions_priority_range CHECK (priority BETWEEN 1 AND 5) NOT VALID;
ALTER TABLE executions VALIDATE CONSTRAINT executions_priority_range;
ALTER TABLE deferred_starts ADD COLUMN priority smallint;
ALTER TABLE deferred_starts ADD CONSTRAINT deferred_starts_priority_range CHECK (priority BETWEEN 1 AND 5) NOT VALID;
ALTER TABLE deferred_starts VALIDATE CONSTRAINT deferred_starts_priority_range;
