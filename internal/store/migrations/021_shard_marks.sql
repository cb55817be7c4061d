-- A shard's failure mark names the lease it was written under (owner and
-- epoch) and when its runner last refreshed it: a mark counts only while
-- the shard's current lease holder keeps refreshing it (FailingShards),
-- so one left by a process that died, lost its lease, or never heard its
-- write answered cannot outlive the failure. Marks written before this
-- migration name no lease, and no longer count.
ALTER TABLE shard_offsets
    ADD COLUMN failing_owner        text,
    ADD COLUMN failing_epoch        bigint,
    ADD COLUMN failing_refreshed_at timestamptz;

-- A shard no scheduler holds counts from when its last lease ended: a
-- released lease ends now, not at '-infinity', and a new shard's row is
-- unheld from its creation.
UPDATE shard_leases SET expires_at = now() WHERE expires_at = '-infinity';
ALTER TABLE shard_leases ALTER COLUMN expires_at SET DEFAULT now();
