-- Start policies (docs/start-policies.md): the starts a workflow's
-- throttle, debounce or batch policy holds back, kept by the scheduler of
-- the shard their (workflow, kind, key) goes to.

-- The state of one (workflow, kind, key). A throttle's (throttle, JSON):
-- the times its latest starts were scheduled to begin and the times they
-- did begin (Unix microseconds, oldest first), and how many of its starts
-- wait (queued). A debounce's or batch's: its open group, the one
-- collecting starts. A row holds nothing once stale_at has passed with no
-- open group and nothing queued: the sweep deletes it.
CREATE TABLE start_policy_keys (
    workflow_name text NOT NULL,
    kind text NOT NULL,
    policy_key text NOT NULL,
    shard int NOT NULL,
    throttle json,
    queued int NOT NULL DEFAULT 0,
    open_group uuid,
    stale_at timestamptz NOT NULL,
    PRIMARY KEY (workflow_name, kind, policy_key)
);
CREATE INDEX start_policy_keys_stale_idx ON start_policy_keys (stale_at) WHERE open_group IS NULL AND queued = 0;
CREATE INDEX start_policy_keys_open_idx ON start_policy_keys (open_group) WHERE open_group IS NOT NULL;

-- A group of deferred starts that begins one execution at due_at: one
-- throttled start; the starts a debounce collapsed (input is the one the
-- execution takes); a batch (its members' inputs make the execution's).
CREATE TABLE deferred_starts (
    group_id uuid PRIMARY KEY,
    shard int NOT NULL,
    workflow_name text NOT NULL,
    kind text NOT NULL,
    policy_key text NOT NULL,
    due_at timestamptz NOT NULL,
    -- first_seq orders groups due at the same time as their starts came.
    first_seq bigint NOT NULL,
    -- policy is the wire.StartPolicy the group's (last) start came under.
    policy json NOT NULL,
    task_queue text NOT NULL,
    -- jsonb, as executions.input: what it refuses is refused as the start
    -- is applied (and set aside), not when its execution begins.
    input jsonb,
    -- bytes is the size of the members' inputs of a batch, which closes
    -- before its execution's input would outgrow what a task carries.
    bytes bigint NOT NULL DEFAULT 0,
    completion_callback text,
    started_by text,
    trace_parent text,
    size int NOT NULL,
    created_at timestamptz NOT NULL
);
CREATE INDEX deferred_starts_due_idx ON deferred_starts (shard, due_at, first_seq);

-- The starts of a group, in the order they came: each one's command
-- outcome names the group's execution once it begins.
CREATE TABLE deferred_start_members (
    group_id uuid NOT NULL,
    position int NOT NULL,
    command_id text NOT NULL,
    stream_seq bigint NOT NULL,
    input jsonb,
    PRIMARY KEY (group_id, position)
);
