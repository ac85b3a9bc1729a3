-- PostgreSQL's 00017 drops jobs_due, whose smaller size made a claim on a
-- never-analysed jobs table read it whole and sort (issue 18). SQLite keeps
-- alk_jobs_due: its planner, without ANALYZE, still walks alk_jobs_ready
-- for the claim (tests/plans_test.go checks both cases). This version
-- exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
