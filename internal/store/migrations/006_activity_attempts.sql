-- What the scheduler needs to run further attempts of an activity itself.
ALTER TABLE activities ADD COLUMN input jsonb;
ALTER TABLE activities ADD COLUMN options jsonb NOT NULL DEFAULT '{}';
