-- Which command stream a shard's applied_seq counts in: the stream's
-- creation time. A stream deleted and created again (a JetStream store
-- lost or wiped, a fresh embedded server against a database that
-- outlived its old one) numbers its messages from 1 again, and a shard
-- that kept its old applied_seq would skip them all as redeliveries. The
-- scheduler compares it at the start of each session (BindShardStream).
ALTER TABLE shard_offsets ADD COLUMN stream_created timestamptz;
