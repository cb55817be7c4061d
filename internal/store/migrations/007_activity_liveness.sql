-- Heartbeats of the current attempt, and whether the previous attempt's
-- outcome is unknown (it timed out or its worker vanished), which makes
-- the next attempt reconcile before repeating its effect.
ALTER TABLE activities ADD COLUMN heartbeat_details jsonb;
ALTER TABLE activities ADD COLUMN last_heartbeat_at timestamptz;
ALTER TABLE activities ADD COLUMN outcome_unknown boolean NOT NULL DEFAULT false;
