-- SQLite's 00025 moves the predicates of alk_jobs's finished-jobs and
-- expiring indexes off state (onto finished_at), so a claim does not touch
-- them. PostgreSQL maintains an index only for a new row version, whatever
-- the predicate names, and already reads finished jobs and expiring ones
-- through jobs_finished, jobs_listing and jobs_expirable: nothing to do.
-- This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
