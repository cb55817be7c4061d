-- A running execution whose last workflow task failed on its worker (its
-- replay diverged, met a version the code does not support, or the
-- workflow code panicked): why, where, and how often; NULL otherwise.
ALTER TABLE executions ADD COLUMN task_failing jsonb;
