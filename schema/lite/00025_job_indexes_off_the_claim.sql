-- The partial indexes of alk_jobs that a claim need not touch no
-- longer name state in their predicate, so a claim (which changes state,
-- and nothing they name) does not touch them (issue 18). SQLite checks, on
-- every UPDATE of a row, each partial index whose predicate names a column
-- the UPDATE sets: the finished-jobs and expiring indexes cost each claim
-- and each ack about 12,900 instructions a job (callgrind, claim and ack in
-- batches of 100: 169,200 a job before, 156,300 after), although no
-- claimed job was in any of them.
--
-- - alk_jobs_finished and alk_jobs_listing hold the finished jobs: state
--   not pending nor running, which is finished_at IS NOT NULL (every
--   statement that ends a job sets finished_at, every one that makes it
--   pending again clears it; the updates below fill in or clear the rare
--   row that would disagree, so each index keeps exactly its rows).
-- - alk_jobs_expiring and alk_jobs_expiring_by_time hold the jobs that can
--   still expire: expires_at set and not finished. That is the pending
--   jobs they held and also the running ones (a claim leaves them in
--   place), as PostgreSQL's jobs_expirable (00024); the sweeps read them
--   for their pending arm and skip the running rows, which are claims in
--   flight.
--
-- The statements that read these indexes repeat the new predicate so
-- SQLite can use them (queries/lite). PostgreSQL: SELECT 1.

-- +goose Up
UPDATE alk_jobs SET finished_at = created_at
WHERE state NOT IN ('pending', 'running') AND finished_at IS NULL;
UPDATE alk_jobs SET finished_at = NULL
WHERE state = 'pending' AND finished_at IS NOT NULL;
UPDATE alk_jobs SET finished_at = NULL
WHERE state = 'running' AND finished_at IS NOT NULL;
DROP INDEX alk_jobs_finished;
DROP INDEX alk_jobs_listing;
DROP INDEX alk_jobs_expiring;
DROP INDEX alk_jobs_expiring_by_time;
CREATE INDEX alk_jobs_finished ON alk_jobs (queue, state, finished_at) WHERE finished_at IS NOT NULL;
CREATE INDEX alk_jobs_listing ON alk_jobs (queue, state, id) WHERE finished_at IS NOT NULL;
CREATE INDEX alk_jobs_expiring ON alk_jobs (queue, expires_at) WHERE expires_at IS NOT NULL AND finished_at IS NULL;
CREATE INDEX alk_jobs_expiring_by_time ON alk_jobs (expires_at) WHERE expires_at IS NOT NULL AND finished_at IS NULL;

-- +goose Down
DROP INDEX alk_jobs_expiring_by_time;
DROP INDEX alk_jobs_expiring;
DROP INDEX alk_jobs_listing;
DROP INDEX alk_jobs_finished;
CREATE INDEX alk_jobs_finished ON alk_jobs (queue, state, finished_at) WHERE state NOT IN ('pending', 'running');
CREATE INDEX alk_jobs_listing ON alk_jobs (queue, state, id) WHERE state NOT IN ('pending', 'running');
CREATE INDEX alk_jobs_expiring ON alk_jobs (queue, expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
CREATE INDEX alk_jobs_expiring_by_time ON alk_jobs (expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
