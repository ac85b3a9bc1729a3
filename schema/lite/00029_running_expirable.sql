-- SweepAllExpiredJobs' running half (expired jobs of every queue whose
-- claim lapsed) had no index that fits without a queue: alk_jobs_running
-- leads with the queue, so SQLite walked it whole without ANALYZE (88,000
-- VM steps in the plan test for a batch of 20) and skip-scanned it queue by
-- queue with ANALYZE. alk_jobs_expirable_by_time holds the pending and the
-- running jobs that can expire, by expires_at alone, as PostgreSQL's 00029
-- does: the sweep reads one range of it, the jobs already expired. It
-- replaces alk_jobs_expiring_by_time (pending jobs only), whose only reader
-- was this sweep, so a claim or an ack checks as many index predicates as
-- before.

-- +goose Up
CREATE INDEX alk_jobs_expirable_by_time ON alk_jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'running');
DROP INDEX alk_jobs_expiring_by_time;

-- +goose Down
CREATE INDEX alk_jobs_expiring_by_time ON alk_jobs (expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
DROP INDEX alk_jobs_expirable_by_time;
