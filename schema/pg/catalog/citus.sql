-- Never applied: sqlc's view of the one Citus catalog table alkstore reads
-- (CitusState in queries/pg/schema.sql), so that sqlc can type the query.
-- On a Citus server the real table exists; CitusState reads it only there.
CREATE TABLE pg_catalog.pg_dist_schema (
    schemaid     regnamespace NOT NULL,
    colocationid integer      NOT NULL
);
