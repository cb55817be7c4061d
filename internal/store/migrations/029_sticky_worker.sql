-- Sticky workflow tasks (docs/long-workflows.md#sticky-workflow-tasks):
-- the worker that holds an execution in its cache after its last
-- workflow task, to which its next task goes first. NULL: any worker.
ALTER TABLE executions ADD COLUMN sticky_worker text;
