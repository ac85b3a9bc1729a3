-- Run before goose: goose keeps alkstore's version table in the alkstore
-- schema (alkstore.goose_db_version, so it never mixes with an application's
-- own goose history), and goose creates that table before any migration runs.
CREATE SCHEMA IF NOT EXISTS alkstore;
