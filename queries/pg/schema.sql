-- Schema (PostgreSQL): what Open looks at before it asks goose anything.

-- name: SchemaObjects :one
-- Whether alkstore's goose version table (@version_table) and its tables
-- exist, and the qualified name of goose's default version table (the one
-- a goose run without -table writes, found through search_path as goose
-- finds it; empty when absent). Open tells from these a schema applied
-- without alkstore's version table from a fresh database. Reads only the
-- catalog.
SELECT
    (to_regclass(@version_table::text) IS NOT NULL)::boolean AS has_version_table,
    (to_regclass('alkstore.events') IS NOT NULL)::boolean AS has_tables,
    COALESCE((SELECT n.nspname || '.' || c.relname
              FROM pg_catalog.pg_class c
              JOIN pg_catalog.pg_namespace n ON n.oid = c.relnamespace
              WHERE c.oid = to_regclass('goose_db_version')), '')::text AS default_version_table;

-- name: CitusVersion :one
-- The Citus extension's version in this database, empty without Citus.
-- Open says which mode it runs in (docs/design/citus.md). Reads only the
-- catalog.
SELECT COALESCE((SELECT extversion FROM pg_catalog.pg_extension WHERE extname = 'citus'), '')::text AS citus_version;

-- name: CitusSchemaDistributed :one
-- Whether the alkstore schema is a Citus distributed schema (placed on a
-- worker), where the settled horizon does not hold (docs/design/citus.md).
-- Run only when CitusVersion is not empty: pg_dist_schema is Citus's
-- catalog (schema/pg/catalog/citus.sql describes it to sqlc).
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_schema
               WHERE schemaid = to_regnamespace('alkstore'))::boolean AS distributed;

-- Citus commit marker (docs/design/citus.md, "Atomic with a worker"). A
-- transaction that writes one worker's shard and the coordinator's regular
-- tables (alkstore's) is committed by Citus in one phase: the worker's
-- COMMIT goes out before the coordinator's, so a coordinator that fails
-- between them, or a worker whose COMMIT answer is lost, leaves the
-- business row without its event or job. A write to a Citus local table
-- (here one that matches no row) makes Citus commit the transaction in two
-- phases, recorded on the coordinator and recovered after a failure.

-- name: CitusCommitMarkerLock :exec
-- Serializes Opens creating the marker (a transaction-scoped advisory lock).
SELECT pg_advisory_xact_lock(@lock_id::bigint);

-- name: CitusCommitMarkerCreate :exec
-- The marker table, created by Open on Citus only; it never holds a row.
CREATE TABLE IF NOT EXISTS alkstore.citus_commit_marker (id integer PRIMARY KEY);

-- name: CitusCommitMarkerDistribute :exec
-- Makes the marker a Citus local table (so its writes are Citus's), once.
SELECT pg_catalog.citus_add_local_table_to_metadata('alkstore.citus_commit_marker')
WHERE NOT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
                  WHERE logicalrelid = to_regclass('alkstore.citus_commit_marker'));

-- name: CitusCommitMarkerReady :one
-- Whether the marker exists as a Citus local table.
SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_dist_partition
               WHERE logicalrelid = to_regclass('alkstore.citus_commit_marker'))::boolean AS ready;

-- name: CitusTxReadOnly :one
-- Whether the (adopted) transaction is read-only, where the marker's write
-- would fail; such a transaction writes nothing to commit atomically.
SELECT current_setting('transaction_read_only') = 'on' AS read_only;

-- name: CitusMarkCommit :exec
-- Run before a transaction's first alkstore statement: matches no row, and
-- makes Citus commit the transaction in two phases.
UPDATE alkstore.citus_commit_marker SET id = id WHERE id = -1;

-- name: SessionDefaults :exec
-- Run on each connection of the pool Open makes, and on the LISTEN
-- connection (the store's for good), when it connects: the store's
-- auto-commit statements run READ COMMITTED whatever the database's or
-- role's default_transaction_isolation (a claim under REPEATABLE READ or
-- SERIALIZABLE failed with SQLSTATE 40001 when it met a concurrent one),
-- and idle_session_timeout (PostgreSQL 14 and later) never ends an idle
-- connection of the store's, the LISTEN one above all (a notification sent
-- while it reconnects is lost). Read from pg_settings so that a server
-- without the setting skips it; idle_in_transaction_session_timeout is
-- left as it is.
SELECT set_config(s.name, CASE s.name WHEN 'default_transaction_isolation' THEN 'read committed' ELSE '0' END, false)
FROM pg_catalog.pg_settings s
WHERE s.name IN ('default_transaction_isolation', 'idle_session_timeout');
