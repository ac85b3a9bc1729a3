-- PostgreSQL's 00008 turns alkstore.events into a range-partitioned table
-- (see docs/design/partitions.md). SQLite has no partitions: alk_events
-- stays one table and retention deletes rows. This version exists so that
-- both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
