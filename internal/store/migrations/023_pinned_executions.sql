-- How an execution's workflow tasks are routed among builds
-- (docs/versioning.md#pinned-workflows): 'auto_upgrade' to the newest
-- build that registers its workflow, 'pinned' to pinned_build only.
-- pinned_build is NULL for an auto-upgrading execution, and for a pinned
-- one until the build that completes its first workflow task is known.
ALTER TABLE executions
	ADD COLUMN versioning text NOT NULL DEFAULT 'auto_upgrade',
	ADD COLUMN pinned_build text;

-- A deferred start group starts its execution with the versioning of its
-- (last) start.
ALTER TABLE deferred_starts
	ADD COLUMN versioning text,
	ADD COLUMN pinned_build text;
