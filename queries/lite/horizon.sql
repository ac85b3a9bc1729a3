-- The settled horizon made visible (SQLite): one writer at a time commits
-- offsets in order, so every committed event is settled at once and no
-- transaction ever holds delivery back.

-- name: OldestWriteTransaction :many
-- PostgreSQL's statement names the oldest write transaction on the
-- server; on SQLite there is none to name: no row, the same columns.
SELECT CAST(0 AS INTEGER) AS pid, CAST('' AS TEXT) AS datname, CAST('' AS TEXT) AS state,
       CAST(NULL AS INTEGER) AS xact_start, CAST(NULL AS INTEGER) AS query_start, CAST(0 AS INTEGER) AS now
WHERE 0;
