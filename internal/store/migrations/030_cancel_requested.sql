-- Cooperative cancellation (docs/cancellation.md): a cancel no longer
-- closes an execution at once; it records how it was requested (when,
-- why, until when the code may run: store.CancelRequest), and the
-- workflow code, told by a WorkflowCancelRequested event, closes it. A
-- second cancel of the same run finds the request and changes nothing.
ALTER TABLE executions ADD COLUMN cancel_request jsonb;
-- An activity the workflow gave up (request_cancel_activity) is
-- CancelRequested until its attempt in flight ends: it is Completed if the
-- attempt completed after all, else Cancelled; no attempt follows.
ALTER TABLE activities DROP CONSTRAINT activities_status_check;
ALTER TABLE activities ADD CONSTRAINT activities_status_check
	CHECK (status IN ('Scheduled', 'Completed', 'Failed', 'CancelRequested', 'Cancelled'));
-- retry_at is when an activity waiting for a retry is dispatched again,
-- NULL while an attempt is in flight: one given up then has no attempt to
-- wait for, and closes at once.
ALTER TABLE activities ADD COLUMN retry_at timestamptz;
