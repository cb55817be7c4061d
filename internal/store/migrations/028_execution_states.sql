-- Query states (harvest.SetQueryState, docs/long-workflows.md#reading-a-running-workflow):
-- the latest value of each named state of an execution, as the workflow
-- task that last changed it left it. seq is that task's
-- WorkflowTaskCompleted, so it grows with each change of a run's state.
-- A projection, not history: the scheduler upserts a row in the apply
-- transaction that records the task, and the retention pruner deletes
-- an execution's rows with it. No foreign key, as for history events
-- (migration 009): the scheduler writes them only for an execution its
-- transaction read.
CREATE TABLE execution_states (
    execution_id uuid        NOT NULL,
    name         text        NOT NULL,
    value        jsonb       NOT NULL,
    seq          integer     NOT NULL,
    updated_at   timestamptz NOT NULL,
    PRIMARY KEY (execution_id, name)
);
