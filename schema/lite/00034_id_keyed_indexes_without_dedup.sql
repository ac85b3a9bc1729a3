-- PostgreSQL's 00034 switches B-tree deduplication off on the two job
-- indexes whose keys end with the job's id (they never hold equal keys,
-- yet every split of a full page searched it for them). SQLite does not
-- deduplicate index entries, so it has nothing to do. This version exists
-- so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
