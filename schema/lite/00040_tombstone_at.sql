-- PostgreSQL's 00040 adds compaction_heads.tombstone_at, which its 00041
-- fills and indexes so that the janitor's tombstone pass reads the heads
-- and events_tombstones can go: PostgreSQL opened, planned and compiled
-- that partial index for every publish (about 8k instructions of an
-- unkeyed one). SQLite compiles a partial index's predicate into each
-- prepared statement once and tests it per row: with and without
-- alk_events_tombstones an unkeyed publish cost 102.6k-104.0k and
-- 103.9k-105.1k instructions, a keyed one onto 1,024 keys 187.5k-194.1k and
-- 187.4k-187.8k; only a tombstone pays for its entry (214.3k-215.5k
-- against 186.9k-187.0k; callgrind, the whole process, the difference of
-- 1,000 and 3,000 publishes, two runs each). Marking heads instead would
-- add a column to every keyed head upsert, which SQLite updates in an
-- index whenever a statement names it. SQLite keeps the index and its
-- pass: no-op.
-- This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
