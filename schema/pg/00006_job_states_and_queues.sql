-- The job lifecycle of issue 14: distinct final states, and per-queue
-- settings (pause, retention of finished jobs).
--
-- A job ends completed (its handler succeeded), cancelled, expired (past
-- its expires_at) or dead (failed for good: out of attempts or a permanent
-- error). Final rows are kept as their queue's retention says; finished_at
-- (was died_at) is when the job reached its final state.

-- +goose Up
ALTER TABLE alkstore.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE alkstore.jobs ADD CONSTRAINT jobs_state_check
    CHECK (state IN ('pending', 'running', 'completed', 'cancelled', 'expired', 'dead'));
ALTER TABLE alkstore.jobs RENAME COLUMN died_at TO finished_at;
COMMENT ON COLUMN alkstore.jobs.state IS 'pending (waiting for run_at or a worker), running (claimed), or final: completed, cancelled, expired, dead (failed for good)';
COMMENT ON COLUMN alkstore.jobs.finished_at IS 'When the job reached its final state (NULL while pending or running)';

-- Queue settings and state (absent row: defaults). Durations in microseconds.
CREATE TABLE alkstore.queues (
    name                  text        PRIMARY KEY,
    paused                boolean     NOT NULL DEFAULT false,
    completed_retention_us bigint     NOT NULL DEFAULT 0 CHECK (completed_retention_us >= 0),
    dead_retention_us     bigint      CHECK (dead_retention_us > 0),
    updated_at            timestamptz NOT NULL DEFAULT now()
);
COMMENT ON TABLE alkstore.queues IS 'Per-queue settings and state; a queue without a row has the defaults';
COMMENT ON COLUMN alkstore.queues.name IS 'Queue name';
COMMENT ON COLUMN alkstore.queues.paused IS 'Workers claim nothing from a paused queue';
COMMENT ON COLUMN alkstore.queues.completed_retention_us IS 'How long completed jobs are kept, in microseconds (0: deleted when acked)';
COMMENT ON COLUMN alkstore.queues.dead_retention_us IS 'How long dead, cancelled and expired jobs are kept, in microseconds (NULL: until deleted)';
COMMENT ON COLUMN alkstore.queues.updated_at IS 'When the row last changed';

-- +goose Down
DROP TABLE alkstore.queues;
DELETE FROM alkstore.jobs WHERE state = 'completed';
UPDATE alkstore.jobs SET state = 'dead' WHERE state IN ('cancelled', 'expired');
ALTER TABLE alkstore.jobs RENAME COLUMN finished_at TO died_at;
ALTER TABLE alkstore.jobs DROP CONSTRAINT jobs_state_check;
ALTER TABLE alkstore.jobs ADD CONSTRAINT jobs_state_check CHECK (state IN ('pending', 'running', 'dead'));
