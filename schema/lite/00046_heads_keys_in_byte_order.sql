-- PostgreSQL's 00046 gives compaction_heads.key the collation "C", so
-- that heads list, page and lock in byte order whatever the database's
-- collation. SQLite compares text with BINARY, byte order, already.
-- This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
