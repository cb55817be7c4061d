-- Schedules (docs/schedules.md), kept by the scheduler of the shard their
-- id goes to, which fires them from these rows: nothing of a schedule is
-- held only in memory.

-- A schedule: its definition (api.ScheduleRequest, defaults filled in),
-- whether it is paused, and where its firing stands. Every nominal time
-- of its spec up to fired_through was decided (fired, skipped, missed or
-- recorded as paused); next_due is when its shard next has something to
-- do for it (its next nominal time, jitter added), NULL once its spec has
-- no more. running holds its fires whose executions have not closed
-- (store.RunningFire), buffered those waiting for them (overlap).
CREATE TABLE schedules (
    schedule_id text PRIMARY KEY,
    shard int NOT NULL,
    definition jsonb NOT NULL,
    source text NOT NULL,
    paused boolean NOT NULL,
    note text NOT NULL,
    fired_through timestamptz NOT NULL,
    next_due timestamptz,
    running jsonb NOT NULL,
    buffered jsonb NOT NULL,
    created_at timestamptz NOT NULL,
    updated_at timestamptz NOT NULL
);
CREATE INDEX schedules_due_idx ON schedules (shard, next_due) WHERE next_due IS NOT NULL;

-- The ledger of a schedule's fires: one row per nominal time and what
-- made it fire (the spec, a trigger, a backfill), with its outcome.
CREATE TABLE schedule_fires (
    schedule_id text NOT NULL,
    nominal_time timestamptz NOT NULL,
    trigger text NOT NULL,
    outcome text NOT NULL,
    idempotency_key text,
    workflow_id text,
    execution_id uuid,
    execution_status text,
    error text,
    message text,
    recorded_at timestamptz NOT NULL,
    PRIMARY KEY (schedule_id, nominal_time, trigger)
);
-- A fire's row goes when its execution is pruned (the ledger's own rows
-- go when their nominal time is older than the retention).
CREATE INDEX schedule_fires_execution_idx ON schedule_fires (execution_id) WHERE execution_id IS NOT NULL;
