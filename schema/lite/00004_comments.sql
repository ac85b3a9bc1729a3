-- PostgreSQL's 00004 puts COMMENT ON every table and column. SQLite has no
-- COMMENT ON; the comments in these migration files are its documentation.
-- This version exists so that both dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
