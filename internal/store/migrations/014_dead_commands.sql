-- Commands the scheduler could not apply for a reason that retrying will
-- not fix (a value PostgreSQL refuses to store, a message that does not
-- decode), set aside so that the rest of their shard goes on. The
-- apply transaction that dead-letters a command also advances the shard's
-- applied sequence past it and stores its outcome (an error), so a
-- request waiting on it is answered. payload is the message as it came,
-- as bytes: it may hold what the other columns cannot.
CREATE TABLE dead_commands (
    id         bigserial PRIMARY KEY,
    shard      int NOT NULL,
    stream_seq bigint NOT NULL,
    command_id text NOT NULL,
    kind       text NOT NULL,
    subject    text NOT NULL,
    payload    bytea NOT NULL,
    error      text NOT NULL,
    reason     text NOT NULL,
    dead_at    timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX dead_commands_command_id_idx ON dead_commands (command_id);

-- A shard whose applies keep failing (PostgreSQL refusing, a deploy
-- bug) says so here, for readiness checks in other processes: since when,
-- and the last error. Its runner clears both once it applies again.
ALTER TABLE shard_offsets ADD COLUMN failing_since timestamptz, ADD COLUMN last_error text;
