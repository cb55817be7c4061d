-- What a running execution's workflow code waits for, as its last
-- workflow task left it (describe's waiting_on): NULL before its first
-- task completes and once it closes.
ALTER TABLE executions ADD COLUMN waiting jsonb;
