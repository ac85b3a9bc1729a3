-- PostgreSQL's 00029 adds jobs_expirable_by_time (pending and running jobs
-- that can expire, by expires_at) for the sweep of every queue
-- (SweepAllExpiredJobs), whose running half had no index without a queue.
-- SQLite's alk_jobs_expiring_by_time holds the running jobs too since 00025
-- (expires_at IS NOT NULL AND finished_at IS NULL), so its sweep reads one
-- range of it (queries/lite) and needs no new index: an index whose
-- predicate named state would cost every claim and ack again what 00025
-- took off them. This version exists so that both dialects keep the same
-- numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
