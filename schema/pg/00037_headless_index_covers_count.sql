-- SQLite's 00037 adds head_offset to alk_compaction_heads_headless, so that
-- counting a stream's headless rows reads that index alone instead of
-- descending the head table's primary key for each entry. PostgreSQL's
-- index of headless rows (compaction_heads_headless_at, 00031) holds
-- headless_at, the column its count names, so its count is an index-only
-- scan already. This version exists so that both dialects keep the same
-- numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
