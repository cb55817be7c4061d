-- The name of the API token whose request started the execution (NULL
-- when the API had no tokens, or for a start from a webhook or binding).
ALTER TABLE executions ADD COLUMN started_by text;
