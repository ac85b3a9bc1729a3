-- PostgreSQL's 00030 moves the four rules of a job row into the
-- constraints of one domain its one CHECK casts the row to, which
-- PostgreSQL plans once per backend instead of once per statement. SQLite
-- compiles a table's CHECKs into each prepared statement once, so: no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
