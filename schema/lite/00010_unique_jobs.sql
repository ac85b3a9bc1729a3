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
-- statements. (SQLite cannot add a CHECK to an existing table; the library
-- always sets both columns or neither.)

-- +goose Up
ALTER TABLE alk_jobs ADD COLUMN unique_key BLOB;
ALTER TABLE alk_jobs ADD COLUMN unique_states TEXT;
CREATE UNIQUE INDEX alk_jobs_unique ON alk_jobs (unique_key)
    WHERE unique_key IS NOT NULL AND instr(unique_states, ',' || state || ',') > 0;

-- +goose Down
DROP INDEX alk_jobs_unique;
ALTER TABLE alk_jobs DROP COLUMN unique_states;
ALTER TABLE alk_jobs DROP COLUMN unique_key;
