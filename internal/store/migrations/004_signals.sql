-- Keyed signal deliveries: one row per (execution_id, idempotency_key),
-- kept as long as the execution.
CREATE TABLE signal_claims (
    execution_id    uuid        NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    idempotency_key text        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (execution_id, idempotency_key)
);
