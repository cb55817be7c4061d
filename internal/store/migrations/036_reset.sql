-- Reset (docs/reset.md): a run reset to a point of its history links to
-- the new run, and the new run to it, with the activity keys it
-- inherits. NULL for a run that neither was reset nor comes from one.
ALTER TABLE executions ADD COLUMN reset jsonb;
