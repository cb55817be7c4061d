-- Updates (docs/long-workflows.md#updating-a-running-workflow): a request
-- a running workflow answers. workflow_updates holds each update, its
-- state and its answer: an update's key is unique in its chain of
-- continued runs (chain_id is the chain's first run), and execution_id is
-- the run that took (or takes) it. executions.updates holds a run's
-- updates in flight (requested, or accepted and not completed) and how
-- many it was asked for, read with the row by every apply, so that a
-- workflow task carries its pending updates without another read.
CREATE TABLE workflow_updates (
    update_id uuid PRIMARY KEY,
    chain_id uuid NOT NULL,
    execution_id uuid NOT NULL,
    idempotency_key text,
    name text NOT NULL,
    args jsonb,
    status text NOT NULL CHECK (status IN ('requested', 'accepted', 'completed', 'failed', 'rejected')),
    result jsonb,
    failure jsonb,
    error_code text,
    created_at timestamptz NOT NULL DEFAULT now(),
    updated_at timestamptz NOT NULL DEFAULT now(),
    UNIQUE (chain_id, idempotency_key)
);
CREATE INDEX workflow_updates_execution ON workflow_updates (execution_id);

ALTER TABLE executions ADD COLUMN updates jsonb;
