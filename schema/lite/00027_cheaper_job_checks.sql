-- PostgreSQL's 00027 has its CHECK on jobs.state cast to a domain, which
-- PostgreSQL plans once per backend instead of once per statement. SQLite
-- compiles a table's CHECKs into each prepared statement once (00021 gave
-- its state CHECK the cheaper form), so: no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
