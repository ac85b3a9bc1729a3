-- PostgreSQL's 00039 builds four of its job indexes again under
-- predicates that test columns for NULL (jobs_finished, jobs_listing and
-- jobs_expirable on finished_at, jobs_unique on unique_key alone, its held
-- keys a second column), which PostgreSQL plans and compiles once a
-- statement. SQLite's finished and expiring indexes have tested finished_at
-- since its 00025, and it compiles a partial index's predicate into each
-- prepared statement once: no-op. This version exists so that both
-- dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
