-- SQLite's 00021 rewrites the CHECK on alk_jobs.state as comparisons (an IN
-- of six constants made it build an ephemeral table for every row written).
-- PostgreSQL evaluates its IN list as an array comparison without that
-- cost, so its constraint stays as it is. This version exists so that both
-- dialects keep the same numbers.

-- +goose Up
SELECT 1;

-- +goose Down
SELECT 1;
