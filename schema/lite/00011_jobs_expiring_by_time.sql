-- Pending jobs that can expire, by expires_at alone, so the janitor's sweep
-- of every queue (SweepAllExpiredJobs) reads only the jobs already past
-- their expires_at. alk_jobs_expiring leads with the queue, so a sweep of
-- all queues read every expiring job (94 ms at 10^6 delayed jobs in the
-- scale benchmark). Partial: jobs without expires_at cost nothing.

-- +goose Up
CREATE INDEX alk_jobs_expiring_by_time ON alk_jobs (expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;

-- +goose Down
DROP INDEX alk_jobs_expiring_by_time;
