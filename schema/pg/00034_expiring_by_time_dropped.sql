-- SQLite's 00034 drops alk_jobs_expiring_by_time, whose sweep of every
-- queue now walks the queues down alk_jobs_expiring, as PostgreSQL's has
-- since its 00030 dropped jobs_expirable_by_time. PostgreSQL: no-op; this
-- version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
