-- alk_jobs_expiring_by_time (00011, 00025) goes: every INSERT into
-- alk_jobs tests each partial index's predicate, whether or not the row
-- enters it (about 230 instructions a job of a 1,000-job EnqueueMany in
-- the statement's program, callgrind), and its only reader, the janitor's
-- sweep of every queue, now reads its batch (ExpiredJobIDs) by walking the
-- queues down alk_jobs_expiring, one descent per queue with jobs that can
-- expire, and each queue's expired range of it, as PostgreSQL's has since
-- its 00030 dropped the twin jobs_expirable_by_time (queries/lite;
-- tests/plans_test.go holds it to its bounds, analysed and not, beside
-- many queues). A pass costs a descent a queue with jobs that can expire
-- where one range did. PostgreSQL: SELECT 1.

-- +goose Up
DROP INDEX IF EXISTS alk_jobs_expiring_by_time;

-- +goose Down
CREATE INDEX IF NOT EXISTS alk_jobs_expiring_by_time ON alk_jobs (expires_at) WHERE expires_at IS NOT NULL AND finished_at IS NULL;
