-- Command outcomes: what applying a start, signal or cancel came to, by
-- command id, written in the transaction that applied the command. They
-- used to live in a JetStream key-value bucket, which kept one subject per
-- command in the NATS server's memory for the outcome TTL (about 370 B per
-- workflow for 24 hours) and cost a stored message and an outbox row per
-- command. The scheduler still announces each outcome on a core NATS
-- subject after the commit, for the ingest request waiting on it; this
-- table is what a late reader, a broker duplicate and GET
-- /api/harvest/commands/{command_id} read.
--
-- stream_seq is the command stream sequence of the message that produced
-- the outcome: a later message with the same command id (a start evaluated
-- anew once its claim lapsed) replaces it. Rows are deleted once expired
-- (the scheduler's sweep); readers ignore expired rows before that.
CREATE TABLE command_outcomes (
    command_id text PRIMARY KEY,
    stream_seq bigint NOT NULL,
    outcome    json NOT NULL,
    expires_at timestamptz NOT NULL
);
CREATE INDEX command_outcomes_expires_at_idx ON command_outcomes (expires_at);
