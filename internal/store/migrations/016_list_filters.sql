-- Finding executions by a prefix of their idempotency key or workflow_id
-- (the console's and GET /api/harvest/executions' filters). Byte-wise
-- operator classes, so that LIKE 'prefix%' can use them whatever the
-- database's collation; newest first within a prefix.
CREATE INDEX executions_idempotency_key_prefix_idx ON executions (idempotency_key text_pattern_ops, created_at DESC)
    WHERE idempotency_key IS NOT NULL;
CREATE INDEX executions_workflow_id_prefix_idx ON executions (workflow_id text_pattern_ops, created_at DESC);
