-- Job history (issue 14): every attempt's error, and the indexes that list
-- a queue's jobs by state and let the janitor delete finished jobs past
-- their queue's retention without reading the rest.
--
-- errors holds the last 20 attempt errors, oldest first, as JSON text:
-- [{"attempt": n, "at_us": unix microseconds, "error": text}]. A bound, so a
-- job retried for days keeps a row of bounded size (20 causes of at most
-- 8 KiB each).
--
-- alk_jobs_finished (queue, state, finished_at) drives retention and
-- RequeueDead; it replaces alk_jobs_dead, which nothing read.
-- alk_jobs_listing (queue, state, id) pages a queue's finished jobs by
-- state in id order. Both hold finished rows only, so enqueues and claims
-- do not pay for them (over pending rows too, alk_jobs_listing cost
-- EnqueueMany 13-20%); pending and running jobs are listed through
-- alk_jobs_ready and alk_jobs_running.

-- +goose Up
ALTER TABLE alk_jobs ADD COLUMN errors TEXT NOT NULL DEFAULT '[]';
DROP INDEX alk_jobs_dead;
CREATE INDEX alk_jobs_finished ON alk_jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
CREATE INDEX alk_jobs_listing ON alk_jobs (queue, state, id)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');

-- +goose Down
DROP INDEX alk_jobs_listing;
DROP INDEX alk_jobs_finished;
CREATE INDEX alk_jobs_dead ON alk_jobs (queue, finished_at) WHERE state = 'dead';
ALTER TABLE alk_jobs DROP COLUMN errors;
