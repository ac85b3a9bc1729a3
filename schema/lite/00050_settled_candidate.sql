-- PostgreSQL's 00050 adds alkstore.settled_candidate, a settled-horizon
-- candidate that a store proved and every store reads, so a store that has
-- never read settles at once while a long write transaction runs. SQLite
-- reads use no horizon (one writer at a time: commit order is offset
-- order): no-op.
-- This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
