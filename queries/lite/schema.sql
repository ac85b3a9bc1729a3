-- Schema (SQLite): what Open looks at before it asks goose anything.

-- name: SchemaObjects :many
-- The tables of the main database (schema, name, type, ncol, wr, strict).
-- Open looks for alkstore's goose version table, its tables (alk_events)
-- and goose's default version table (goose_db_version, which a goose run
-- without -table writes), to tell a schema applied without alkstore's
-- version table from a fresh database. PostgreSQL's SchemaObjects answers
-- the same from its catalog; sqlc knows no SQLite catalog, so this PRAGMA is
-- read through queries.SchemaObjects.
PRAGMA main.table_list;

-- name: CitusVersion :one
-- PostgreSQL's twin reads the Citus extension's version; SQLite has none.
SELECT CAST('' AS TEXT) AS citus_version;

-- name: CitusSchemaDistributed :one
-- PostgreSQL's twin asks Citus whether the alkstore schema is distributed;
-- SQLite never is.
SELECT CAST(0 AS BOOLEAN) AS distributed;

-- Citus commit marker: PostgreSQL's twins run only on Citus (the store
-- never calls these on SQLite).

-- name: CitusCommitMarkerLock :exec
SELECT CAST(@lock_id AS INTEGER) AS lock_id;

-- name: CitusCommitMarkerCreate :exec
SELECT 1 AS done;

-- name: CitusCommitMarkerDistribute :exec
SELECT 1 AS done;

-- name: CitusCommitMarkerReady :one
SELECT CAST(0 AS BOOLEAN) AS ready;

-- name: CitusTxReadOnly :one
SELECT CAST(0 AS BOOLEAN) AS read_only;

-- name: CitusMarkCommit :exec
SELECT 1 AS done;

-- name: SessionDefaults :exec
-- PostgreSQL's twin sets the isolation default and idle_session_timeout of
-- the store's connections; SQLite has neither.
SELECT 1;
