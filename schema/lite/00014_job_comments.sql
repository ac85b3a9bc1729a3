-- PostgreSQL's 00014 corrects the COMMENT ON text of its jobs table (an
-- expired or cancelled job no longer goes to dead). SQLite stores no
-- comments. This version exists so that both dialects keep the same
-- numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
