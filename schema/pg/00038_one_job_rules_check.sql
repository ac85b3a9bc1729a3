-- SQLite's 00038 folds alk_jobs's rules on the state into one CHECK and gives
-- max_attempts a default, so that its batch without options leaves the
-- column out. PostgreSQL's job rules are already one domain the table's
-- CHECK casts the row to (00030), and its batch binds one max_attempts a
-- statement: no-op.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
