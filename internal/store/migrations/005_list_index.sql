-- Listing executions newest first, optionally by workflow and status.
CREATE INDEX executions_created_at_idx ON executions (created_at DESC, execution_id DESC);
CREATE INDEX executions_status_idx ON executions (status, created_at DESC);
