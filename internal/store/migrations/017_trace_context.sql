-- The W3C trace context (traceparent) an execution was started under, and
-- the one each outbox row's message carries, so that tasks dispatched
-- later (a timer firing, a task sent again) stay in the start's trace.
-- NULL when tracing is off.
ALTER TABLE executions ADD COLUMN trace_parent text;
ALTER TABLE outbox ADD COLUMN trace_parent text;
