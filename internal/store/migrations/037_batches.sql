-- Batch operations (docs/batches.md): a batch has a part on one shard of
-- each store, which sends its operation to that store's matching
-- executions at its rate, newest first from its cursor, and counts what
-- the executions' shards report back. batch_items holds one row per
-- execution reported, so that a report repeated changes nothing; it is
-- deleted with its batch.
CREATE TABLE batches (
    batch_id    uuid        NOT NULL,
    shard       int         NOT NULL,
    spec        jsonb       NOT NULL,
    state       text        NOT NULL CHECK (state IN ('running', 'completed', 'cancelled')),
    -- The cursor: the last execution sent to, in (created_at, execution_id)
    -- descending order; NULL before the first.
    cursor_at   timestamptz,
    cursor_id   uuid,
    -- exhausted: every matching execution has been sent to.
    exhausted   boolean     NOT NULL DEFAULT false,
    matched     bigint      NOT NULL DEFAULT 0,
    done        bigint      NOT NULL DEFAULT 0,
    failed      bigint      NOT NULL DEFAULT 0,
    next_due    timestamptz,
    created_at  timestamptz NOT NULL,
    updated_at  timestamptz NOT NULL,
    finished_at timestamptz,
    PRIMARY KEY (batch_id, shard)
);
CREATE INDEX batches_due ON batches (shard, next_due) WHERE state = 'running' AND next_due IS NOT NULL;
CREATE INDEX batches_created ON batches (created_at DESC, batch_id);

CREATE TABLE batch_items (
    batch_id     uuid        NOT NULL,
    execution_id uuid        NOT NULL,
    error        text,
    message      text,
    at           timestamptz NOT NULL,
    PRIMARY KEY (batch_id, execution_id)
);
