-- The partial indexes of finished jobs (00009) with a predicate SQLite
-- evaluates in two comparisons. state IN (four values) made SQLite build
-- an ephemeral table of the four strings for every row written to alk_jobs
-- (OP_OpenEphemeral and four inserts per index, on every enqueue, and twice
-- per index on every update of a job's state: claim, ack, retry), although
-- pending and running rows are never in these indexes; an IN or NOT IN of
-- at most two constants is coded as comparisons. The CHECK on state makes
-- NOT IN ('pending', 'running') the same set of rows, so the indexes hold
-- the same entries under the same names. The statements that read them
-- repeat the predicate so SQLite can use them (queries/lite).

-- +goose Up
DROP INDEX alk_jobs_finished;
DROP INDEX alk_jobs_listing;
CREATE INDEX alk_jobs_finished ON alk_jobs (queue, state, finished_at)
    WHERE state NOT IN ('pending', 'running');
CREATE INDEX alk_jobs_listing ON alk_jobs (queue, state, id)
    WHERE state NOT IN ('pending', 'running');

-- +goose Down
DROP INDEX alk_jobs_listing;
DROP INDEX alk_jobs_finished;
CREATE INDEX alk_jobs_finished ON alk_jobs (queue, state, finished_at)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
CREATE INDEX alk_jobs_listing ON alk_jobs (queue, state, id)
    WHERE state IN ('completed', 'cancelled', 'expired', 'dead');
