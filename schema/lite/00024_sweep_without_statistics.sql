-- PostgreSQL's 00024 replaces jobs_expiring with jobs_expirable (pending
-- and running jobs that can expire), so that a queue's expired sweep on a
-- never-analysed table reads that one index (issue 18). SQLite's sweep is a
-- union of two index ranges, alk_jobs_expiring and alk_jobs_running, which
-- its planner keeps without ANALYZE (tests/plans_test.go checks both
-- cases). This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
