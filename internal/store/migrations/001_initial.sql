-- Executions: one row per workflow run.
CREATE TABLE executions (
    execution_id    uuid        PRIMARY KEY,
    shard           integer     NOT NULL,
    workflow_name   text        NOT NULL,
    workflow_id     text        NOT NULL,
    task_queue      text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('Running', 'Completed', 'Failed', 'Cancelled', 'Terminated', 'TimedOut')),
    input           jsonb,
    result          jsonb,
    error           jsonb,
    -- last_seq is the seq of the newest history event.
    last_seq        integer     NOT NULL DEFAULT 0,
    -- The workflow task protocol: at most one workflow task is outstanding;
    -- wft_id identifies it, wft_dirty says new events arrived meanwhile.
    wft_id          integer     NOT NULL DEFAULT 0,
    wft_outstanding boolean     NOT NULL DEFAULT false,
    wft_dirty       boolean     NOT NULL DEFAULT false,
    idempotency_key text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz
);
CREATE INDEX executions_workflow_id_idx ON executions (workflow_name, workflow_id, created_at DESC);

-- The event history of each execution, numbered from 1.
CREATE TABLE history_events (
    execution_id uuid        NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    seq          integer     NOT NULL,
    type         text        NOT NULL,
    at           timestamptz NOT NULL DEFAULT now(),
    attrs        jsonb       NOT NULL DEFAULT '{}',
    PRIMARY KEY (execution_id, seq)
);

-- Start idempotency claims: one per (workflow_name, idempotency_key) while
-- the retention window lasts.
CREATE TABLE start_claims (
    workflow_name   text        NOT NULL,
    idempotency_key text        NOT NULL,
    execution_id    uuid        NOT NULL,
    created_at      timestamptz NOT NULL DEFAULT now(),
    expires_at      timestamptz NOT NULL,
    PRIMARY KEY (workflow_name, idempotency_key)
);
CREATE INDEX start_claims_expires_at_idx ON start_claims (expires_at);

-- Shard leases, fenced by epoch: taking over a shard bumps its epoch, and
-- every apply transaction checks that it still holds (owner, epoch).
CREATE TABLE shard_leases (
    shard      integer     PRIMARY KEY,
    owner      text,
    epoch      bigint      NOT NULL DEFAULT 0,
    expires_at timestamptz NOT NULL DEFAULT '-infinity'
);

-- The last command stream sequence applied per shard, written in the same
-- transaction as the effects of the commands.
CREATE TABLE shard_offsets (
    shard       integer PRIMARY KEY,
    applied_seq bigint  NOT NULL DEFAULT 0
);

-- Activities: one row per logical activity invocation, tracking its
-- current attempt, so a late or repeated result is recognised and dropped.
CREATE TABLE activities (
    execution_id    uuid        NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    activity_id     integer     NOT NULL,
    activity_name   text        NOT NULL,
    status          text        NOT NULL CHECK (status IN ('Scheduled', 'Completed', 'Failed')),
    attempt         integer     NOT NULL DEFAULT 1,
    idempotency_key text        NOT NULL,
    scheduled_at    timestamptz NOT NULL DEFAULT now(),
    closed_at       timestamptz,
    PRIMARY KEY (execution_id, activity_id)
);

-- Scheduler processes alive now, so each can take its fair share of shards.
CREATE TABLE schedulers (
    owner      text        PRIMARY KEY,
    expires_at timestamptz NOT NULL
);

-- Durable timers owned by the scheduler.
CREATE TABLE timers (
    timer_id     bigserial   PRIMARY KEY,
    shard        integer     NOT NULL,
    execution_id uuid        NOT NULL REFERENCES executions (execution_id) ON DELETE CASCADE,
    kind         text        NOT NULL,
    fire_at      timestamptz NOT NULL,
    attrs        jsonb       NOT NULL DEFAULT '{}'
);
CREATE INDEX timers_due_idx ON timers (shard, fire_at);

-- Messages to publish after the transaction that produced them commits:
-- tasks for workers and command outcomes for ingest.
CREATE TABLE outbox (
    id         bigserial   PRIMARY KEY,
    shard      integer     NOT NULL,
    subject    text        NOT NULL,
    msg_id     text        NOT NULL,
    payload    bytea       NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX outbox_shard_idx ON outbox (shard, id);
