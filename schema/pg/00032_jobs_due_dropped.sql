-- SQLite's 00032 drops alk_jobs_due, whose readers now walk alk_jobs_ready
-- one priority at a time, as PostgreSQL's have since 00017 dropped
-- jobs_due. This version exists so that both dialects keep the same
-- numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
