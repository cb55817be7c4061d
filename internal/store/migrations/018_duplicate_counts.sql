-- How many duplicates each start key and each keyed signal absorbed, by
-- the layer that caught them, for the console and describe:
--   replay: ingest answered a keyed start from its claim, publishing
--           nothing (the start failed ingest's own checks);
--   broker: JetStream dropped the message as a duplicate of a message id
--           it holds (PubAck.Duplicate), seen by ingest or a binding;
--   claim:  the scheduler found the key already claimed (a start) or the
--           signal already delivered.
-- Only the scheduler writes them, in its apply transactions: it counts
-- the claim layer as it applies, and ingest and bindings, which never
-- write PostgreSQL, report the layers they see as `duplicate` commands
-- on the duplicated command's shard, so each is applied after the
-- message it duplicates and finds its claim.
--
-- The counts live and go with their rows: a start claim's with the claim
-- (deleted by the sweep of expired claims, reset when an expired claim is
-- taken over by a new start of the key); a signal claim's with the
-- signal claim, which lives as long as its execution (whatever prunes
-- executions deletes their signal claims).
ALTER TABLE start_claims
    ADD COLUMN replay_duplicates bigint NOT NULL DEFAULT 0,
    ADD COLUMN broker_duplicates bigint NOT NULL DEFAULT 0,
    ADD COLUMN claim_duplicates  bigint NOT NULL DEFAULT 0;
ALTER TABLE signal_claims
    ADD COLUMN broker_duplicates bigint NOT NULL DEFAULT 0,
    ADD COLUMN claim_duplicates  bigint NOT NULL DEFAULT 0;
