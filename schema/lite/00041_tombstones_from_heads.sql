-- PostgreSQL's 00041 moves the janitor's tombstone pass onto the heads
-- and drops events_tombstones (see 00040): no-op on SQLite, which keeps
-- alk_events_tombstones. This version exists so that both dialects keep
-- the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
