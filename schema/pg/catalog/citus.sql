-- Never applied: sqlc's view of the Citus catalog tables alkstore reads
-- (CitusSchemaDistributed, CitusCommitMarkerReady in queries/pg/schema.sql)
-- and of the marker table Open creates on Citus only (CitusCommitMarker*),
-- so that sqlc can type the queries. On a Citus server the catalog tables
-- exist; the queries read them only there.
CREATE TABLE pg_catalog.pg_dist_schema (
    schemaid     regnamespace NOT NULL,
    colocationid integer      NOT NULL
);
CREATE TABLE pg_catalog.pg_dist_partition (
    logicalrelid regclass NOT NULL
);
CREATE TABLE alkstore.citus_commit_marker (
    id integer PRIMARY KEY
);
