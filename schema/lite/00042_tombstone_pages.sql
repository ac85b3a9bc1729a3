-- PostgreSQL's 00042 gives its tombstone pass an index it can page
-- through (compaction_heads_tombstones): no-op on SQLite, whose pass pages
-- through alk_events_tombstones by offset already. This version exists so
-- that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
