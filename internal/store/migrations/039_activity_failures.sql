-- An activity waiting for its next attempt keeps why the last one
-- failed (describe's pending_activities): NULL while none has.
ALTER TABLE activities ADD COLUMN last_failure jsonb;
