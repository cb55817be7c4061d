-- The URL a start asked Harvest to POST the execution's outcome to.
ALTER TABLE executions ADD COLUMN completion_callback text;

-- One delivery per closed execution that asked for a callback. Scheduler
-- replicas deliver those of the shards they own; next_attempt_at doubles as
-- a short lease while a delivery is in flight.
CREATE TABLE callback_deliveries (
    execution_id    uuid        PRIMARY KEY REFERENCES executions (execution_id) ON DELETE CASCADE,
    shard           integer     NOT NULL,
    url             text        NOT NULL,
    payload         jsonb       NOT NULL,
    attempts        integer     NOT NULL DEFAULT 0,
    next_attempt_at timestamptz NOT NULL DEFAULT now(),
    delivered_at    timestamptz,
    failed_at       timestamptz,
    last_error      text,
    created_at      timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX callback_deliveries_due_idx ON callback_deliveries (shard, next_attempt_at)
    WHERE delivered_at IS NULL AND failed_at IS NULL;
