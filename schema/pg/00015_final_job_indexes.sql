-- SQLite's 00015 rewrites the predicate of its finished-jobs indexes
-- (state IN four values made it build an ephemeral table on every write
-- of a job). PostgreSQL evaluates the same IN list as an array comparison
-- without that cost, so its indexes stay as they are. This version exists
-- so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
