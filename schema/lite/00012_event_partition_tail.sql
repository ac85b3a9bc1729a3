-- PostgreSQL's 00012 fences the default events partition and adds a tail
-- partition, so creating partitions never scans the default one. SQLite
-- has no partitions: nothing to do.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
