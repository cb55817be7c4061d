-- The size of each execution's history in bytes (its events' types and
-- attributes, as the scheduler appends them), beside its length
-- (last_seq), and the limits it was warned of once it passed a warning
-- threshold (docs/reliability.md#history-limits). The histories of
-- executions that already exist are counted here once, from their stored
-- events.
ALTER TABLE executions
    ADD COLUMN history_bytes bigint NOT NULL DEFAULT 0,
    ADD COLUMN history_warning jsonb;

UPDATE executions e SET history_bytes = h.bytes
FROM (SELECT execution_id, sum(octet_length(type) + octet_length(attrs::text)) AS bytes
      FROM history_events GROUP BY execution_id) h
WHERE e.execution_id = h.execution_id;
