-- Job history (issue 14): every attempt's error, and the indexes that list
-- a queue's jobs by state and let the janitor delete finished jobs past
-- their queue's retention without reading the rest.
--
-- errors holds the last 20 attempt errors, oldest first, each
-- {"attempt": n, "at_us": unix microseconds, "error": text}: a bound, so a
-- job retried for days keeps a row of bounded size (20 causes of at most
-- 8 KiB each).
--
-- jobs_finished (queue, state, finished_at) drives retention and
-- RequeueDead; it replaces jobs_dead, which nothing read. jobs_listing
-- (queue, state, id) pages a queue's finished jobs by state in id order.
-- Both hold finished rows only, so enqueues and claims do not pay for them
-- (over pending rows too, jobs_listing cost EnqueueMany 13-36%); pending
-- and running jobs are listed through jobs_ready and jobs_running.

-- +goose Up
ALTER TABLE alkstore.jobs ADD COLUMN errors jsonb NOT NULL DEFAULT '[]';
COMMENT ON COLUMN alkstore.jobs.errors IS 'The last 20 attempt errors, oldest first: [{"attempt": n, "at_us": unix microseconds, "error": text}]';
DROP INDEX alkstore.jobs_dead;
CREATE INDEX jobs_finished ON alkstore.jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
COMMENT ON INDEX alkstore.jobs_finished IS 'Finished jobs by queue, state and age: retention and RequeueDead';
CREATE INDEX jobs_listing ON alkstore.jobs (queue, state, id)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
COMMENT ON INDEX alkstore.jobs_listing IS 'Finished jobs by queue and state in id order (Queue.Jobs)';

-- +goose Down
DROP INDEX alkstore.jobs_listing;
DROP INDEX alkstore.jobs_finished;
CREATE INDEX jobs_dead ON alkstore.jobs (queue, finished_at) WHERE state = 'dead';
ALTER TABLE alkstore.jobs DROP COLUMN errors;
