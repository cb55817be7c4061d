-- Child workflows (docs/children.md): a child's execution names its
-- parent (parent: wire.ParentRef), and the parent keeps its children as
-- they stand (children: store.RunChildren), which GET
-- /api/harvest/executions/{id}/children lists and its close policy reads.
ALTER TABLE executions ADD COLUMN parent jsonb, ADD COLUMN children jsonb;
CREATE INDEX executions_parent ON executions ((parent->>'execution_id')) WHERE parent IS NOT NULL;
