-- PostgreSQL's 00035 checks the rules of a job row by the predicate of an
-- index that holds no rows instead of by a table CHECK (PostgreSQL plans a
-- table CHECK again for every statement, an index predicate once per
-- backend), stops jobs_ready and jobs_listing deduplicating their always
-- distinct keys, and builds the finished-jobs indexes again over
-- state <> ALL ('{pending,running}'). SQLite compiles a table's CHECKs into
-- each prepared statement once, does not deduplicate index entries, and
-- its finished-jobs indexes test state NOT IN ('pending', 'running') since
-- its 00015, so it needs none of it. This version
-- exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
