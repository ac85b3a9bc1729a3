-- SQLite's 00035 rewrites its running-and-claimed CHECK into two cheaper
-- ones. PostgreSQL's job rules are one domain the table's CHECK casts the
-- row to (00030), planned once a backend: no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
