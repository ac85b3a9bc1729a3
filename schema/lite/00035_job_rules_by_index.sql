-- PostgreSQL's 00035 checks the rules of a job row by the predicate of an
-- index that holds no rows instead of by a table CHECK (PostgreSQL plans a
-- table CHECK again for every statement, an index predicate once per
-- backend) and stops jobs_ready and jobs_listing deduplicating their
-- always distinct keys.
-- SQLite compiles a table's CHECKs into each prepared statement once and
-- does not deduplicate index entries, so it needs neither. This version
-- exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
