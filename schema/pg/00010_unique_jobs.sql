-- Unique jobs (issue 14): a job may carry an idempotency key. While a job
-- with a key is in one of the states it names, no other job with that key
-- is stored: the enqueue of a duplicate inserts nothing (ON CONFLICT DO
-- NOTHING) and returns the existing job's id.
--
-- unique_key is a digest of the queue, the caller's key and, for a key
-- scoped by period, the period's start, computed by the library; so a key
-- of the next period is another key. unique_states lists the states the
-- key holds in, as ',pending,running,completed,'. The index is partial and
-- its predicate reads the row's own state: a job leaves the key's scope by
-- the very update that moves it to a state not in its list (ack, cancel,
-- bury, expiry), with no statement of its own and no change to those
-- statements.

-- +goose Up
ALTER TABLE alkstore.jobs ADD COLUMN unique_key bytea;
ALTER TABLE alkstore.jobs ADD COLUMN unique_states text;
ALTER TABLE alkstore.jobs ADD CONSTRAINT jobs_unique_check CHECK ((unique_key IS NULL) = (unique_states IS NULL));
CREATE UNIQUE INDEX jobs_unique ON alkstore.jobs (unique_key)
    WHERE unique_key IS NOT NULL AND strpos(unique_states, ',' || state || ',') > 0;
COMMENT ON COLUMN alkstore.jobs.unique_key IS 'Idempotency key digest (queue, key, period start); NULL: not a unique job';
COMMENT ON COLUMN alkstore.jobs.unique_states IS 'States in which unique_key holds, as '',pending,running,''; NULL with unique_key';

-- +goose Down
DROP INDEX alkstore.jobs_unique;
ALTER TABLE alkstore.jobs DROP CONSTRAINT jobs_unique_check;
ALTER TABLE alkstore.jobs DROP COLUMN unique_states;
ALTER TABLE alkstore.jobs DROP COLUMN unique_key;
