-- alk_jobs_due (pending jobs by queue and run_at) goes: every claim and
-- every ack wrote it (a pending job's entry leaves it when the job is
-- claimed), about 12,800 instructions a job of a burn-down (callgrind,
-- claim and ack in batches of 100: 156,200 a job with it), and its only
-- readers, NextJobDue and QueueStats, now walk the queue's distinct
-- pending priorities down alk_jobs_ready as PostgreSQL's do since its
-- 00017 (queries/lite; tests/plans_test.go holds both to their bounds,
-- analysed and not). An enqueue writes one index entry fewer.
-- PostgreSQL: SELECT 1 (its jobs_due went in 00017).

-- +goose Up
DROP INDEX alk_jobs_due;

-- +goose Down
CREATE INDEX alk_jobs_due ON alk_jobs (queue, run_at) WHERE state = 'pending';
