-- The fingerprint (SHA-256 of the canonical JSON input) of the start that
-- took a claim, for deployments that reject a key reused with other input.
ALTER TABLE start_claims ADD COLUMN fingerprint text NOT NULL DEFAULT '';
