-- PostgreSQL's 00031 moves the janitor's index of headless heads to a
-- column of its own (headless_at), so that a publish onto a headed row is
-- a HOT update. SQLite has no HOT updates, and its head table is clustered
-- on the key (WITHOUT ROWID): an update of a head writes that one row in
-- place whatever the indexes, so it needs nothing. This version exists so
-- that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
