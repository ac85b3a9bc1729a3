-- SweepAllExpiredJobs' running half (expired jobs of every queue whose
-- claim lapsed) had no index that fits without a queue: jobs_running and
-- jobs_expirable both lead with the queue. With expired running jobs of
-- many queues, an analysed generic plan ran a sequential scan with LIMIT
-- over every job (837 buffers before it found 500 rows; 1,841 in the plan
-- test), and on a never-analysed table its pending half read jobs_ready
-- whole (a bitmap AND with jobs_expirable, 1,380 buffers for no row).
-- jobs_expirable_by_time holds the pending and the running jobs that can
-- expire, by expires_at alone: the sweep reads one range of it, the jobs
-- already expired, skipping the running ones still in flight, and names
-- both states at once (state IN (...)), which implies no index's predicate
-- but jobs_expirable's and this one's. Its predicate adds priority IS NOT
-- NULL, always true (the column is NOT NULL), which a queue's sweep
-- (SweepExpiredJobs, jobs_expirable's reader) never states: without it the
-- two indexes had the same predicate, and an analysed queue's sweep read
-- this index across every queue (806 buffers for no row). It replaces jobs_expiring_by_time (pending jobs only), whose
-- only reader was this sweep, so a claim or an ack checks as many index
-- predicates as before.

-- +goose Up
CREATE INDEX jobs_expirable_by_time ON alkstore.jobs (expires_at)
    WHERE expires_at IS NOT NULL AND state IN ('pending', 'running') AND priority IS NOT NULL;
COMMENT ON INDEX alkstore.jobs_expirable_by_time IS 'Pending and running jobs that can expire, by expires_at: the janitor''s sweep of every queue (SweepAllExpiredJobs)';
DROP INDEX alkstore.jobs_expiring_by_time;

-- +goose Down
CREATE INDEX jobs_expiring_by_time ON alkstore.jobs (expires_at) WHERE state = 'pending' AND expires_at IS NOT NULL;
COMMENT ON INDEX alkstore.jobs_expiring_by_time IS 'Pending jobs that can expire, by expires_at: the janitor''s sweep of every queue (SweepAllExpiredJobs)';
DROP INDEX alkstore.jobs_expirable_by_time;
