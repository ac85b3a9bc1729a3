-- PostgreSQL's 00030 moves the four rules of a job row into the
-- constraints of one domain its one CHECK casts the row to, which
-- PostgreSQL plans once per backend instead of once per statement, and
-- drops the index of its sweep of every queue (which now walks the queues
-- down the index of a queue's sweep). SQLite compiles a table's CHECKs into
-- each prepared statement once, and its sweep keeps its index
-- (alk_jobs_expiring_by_time, whose predicate names no state), so: no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
