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
